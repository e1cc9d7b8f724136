package streams

import (
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	spool "github.com/spoolq/spool/shared"
)

// Settings are the tunable parts of the topology. The envconfig tags let a
// binary embed Settings in its Config (SPOOL_REPLICAS, ...); the zero value
// of each field means its default.
type Settings struct {
	// Replicas of every stream, consumer and bucket: 1 for one server, 3 for
	// a cluster. SPOOL_REPLICAS, default 1.
	Replicas int `envconfig:"REPLICAS" default:"1" desc:"replicas of every stream, consumer and bucket (3 on a cluster)"`
	// Storage is file or memory. SPOOL_STORAGE, default file.
	Storage string `envconfig:"STORAGE" default:"file" desc:"file or memory"`
	// DuplicateWindow is the publish dedup window of the task and DLQ
	// streams. SPOOL_DUPLICATE_WINDOW, default 2m.
	DuplicateWindow time.Duration `envconfig:"DUPLICATE_WINDOW" default:"2m" desc:"publish dedup window of the task and DLQ streams"`
	// MaxMsgSize caps one task (payload plus headers) in bytes.
	// SPOOL_MAX_MSG_SIZE, default 1048576 (1 MiB).
	MaxMsgSize int32 `envconfig:"MAX_MSG_SIZE" default:"1048576" desc:"largest task (payload plus headers), bytes"`
	// AckWait is how long a delivered task may go without an ack or a
	// heartbeat before it is redelivered. SPOOL_ACK_WAIT, default 30s.
	AckWait time.Duration `envconfig:"ACK_WAIT" default:"30s" desc:"time a task may run without an ack or heartbeat before redelivery"`
	// MaxDeliver caps deliveries of one task, whatever its retry count; a task
	// that crashes its worker every time is dead-lettered after this many.
	// SPOOL_MAX_DELIVER, default 10.
	MaxDeliver int `envconfig:"MAX_DELIVER" default:"10" desc:"deliveries of one task at most"`
	// MaxAckPending caps tasks delivered but not yet acked per priority,
	// including tasks waiting in retry backoff. SPOOL_MAX_ACK_PENDING,
	// default 100000.
	MaxAckPending int `envconfig:"MAX_ACK_PENDING" default:"100000" desc:"tasks in flight per priority"`
	// Partitions is how many task streams hold the queued tasks (see
	// docs/scaling.md): 1 is the single SPOOL_TASKS stream; K > 1 adds
	// SPOOL_TASKS_1 … SPOOL_TASKS_<K-1>, fed by the server's subject
	// mapping (spool.Names.PartitionMapping), each with its leader on
	// another server. SPOOL_PARTITIONS, default 1.
	Partitions int `envconfig:"PARTITIONS" default:"1" desc:"task streams (partitions); more than 1 needs the server's subject mapping, see docs/scaling.md"`
	// ResultTTL is how long result documents are kept. SPOOL_RESULT_TTL,
	// default 24h.
	ResultTTL time.Duration `envconfig:"RESULT_TTL" default:"24h" desc:"how long result documents are kept"`
	// Consumers is how workers pull: ConsumersByPriority (one consumer per
	// priority, shared by every task type: every worker must serve every
	// type) or ConsumersByType (one consumer per priority and served type
	// pattern, created by the workers that serve it: each worker pulls only
	// its types, and a type nobody serves waits). SPOOL_CONSUMERS; empty
	// keeps what SPOOL_TASKS records: type for a new deployment, priority
	// for a stream that records none (provisioned before the setting).
	Consumers string `envconfig:"CONSUMERS" desc:"how workers pull: priority (every worker serves every type) or type (each worker pulls only the types it serves); empty keeps what the task stream records, type for a new deployment"`
}

// MaxPartitions caps Settings.Partitions: a worker sends pull requests to
// every partition, so partitions beyond the servers' count buy nothing.
const MaxPartitions = 16

// DefaultSettings returns the documented defaults.
func DefaultSettings() Settings {
	return Settings{}.WithDefaults()
}

// WithDefaults fills zero fields with their defaults.
func (s Settings) WithDefaults() Settings {
	if s.Replicas == 0 {
		s.Replicas = 1
	}
	if s.Storage == "" {
		s.Storage = "file"
	}
	if s.DuplicateWindow == 0 {
		s.DuplicateWindow = 2 * time.Minute
	}
	if s.MaxMsgSize == 0 {
		s.MaxMsgSize = 1 << 20
	}
	if s.AckWait == 0 {
		s.AckWait = 30 * time.Second
	}
	if s.MaxDeliver == 0 {
		s.MaxDeliver = 10
	}
	if s.MaxAckPending == 0 {
		s.MaxAckPending = 100_000
	}
	if s.ResultTTL == 0 {
		s.ResultTTL = 24 * time.Hour
	}
	if s.Partitions == 0 {
		s.Partitions = 1
	}
	return s
}

// Validate checks the settings, naming the environment variable at fault.
func (s Settings) Validate() error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: %s", ErrInvalidSettings, fmt.Sprintf(format, a...))
	}
	switch {
	case s.Replicas < 1 || s.Replicas > 5:
		return bad("SPOOL_REPLICAS: %d must be 1 to 5", s.Replicas)
	case s.Storage != "file" && s.Storage != "memory":
		return bad("SPOOL_STORAGE: %q is not file or memory", s.Storage)
	case s.DuplicateWindow < time.Second:
		return bad("SPOOL_DUPLICATE_WINDOW: %s must be at least 1s", s.DuplicateWindow)
	case s.MaxMsgSize < 1024:
		return bad("SPOOL_MAX_MSG_SIZE: %d must be at least 1024 bytes", s.MaxMsgSize)
	case s.AckWait < time.Second:
		return bad("SPOOL_ACK_WAIT: %s must be at least 1s", s.AckWait)
	case s.MaxDeliver < 2:
		return bad("SPOOL_MAX_DELIVER: %d must be at least 2", s.MaxDeliver)
	case s.MaxAckPending < 1:
		return bad("SPOOL_MAX_ACK_PENDING: %d must be positive", s.MaxAckPending)
	case s.Partitions < 1 || s.Partitions > MaxPartitions:
		return bad("SPOOL_PARTITIONS: %d must be 1 to %d", s.Partitions, MaxPartitions)
	case s.ResultTTL < time.Second:
		return bad("SPOOL_RESULT_TTL: %s must be at least 1s", s.ResultTTL)
	case s.Consumers != "" && s.Consumers != ConsumersByPriority && s.Consumers != ConsumersByType:
		return bad("SPOOL_CONSUMERS: %q is not %s or %s", s.Consumers, ConsumersByPriority, ConsumersByType)
	}
	return nil
}

func (s Settings) storage() jetstream.StorageType {
	if s.Storage == "memory" {
		return jetstream.MemoryStorage
	}
	return jetstream.FileStorage
}

// Topology is the full set of JetStream objects for one prefix.
type Topology struct {
	Names    spool.Names
	Settings Settings
}

// New validates settings (after defaults) and returns the topology.
func New(names spool.Names, s Settings) (Topology, error) {
	s = s.WithDefaults()
	if err := s.Validate(); err != nil {
		return Topology{}, err
	}
	return Topology{Names: names, Settings: s}, nil
}
