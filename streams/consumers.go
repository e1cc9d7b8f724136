package streams

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	spool "github.com/spoolq/spool/shared"
)

// How workers pull, recorded on SPOOL_TASKS under ConsumersKey.
const (
	// ConsumersByPriority: one durable consumer per priority
	// (Names.Consumer), made by provisioning and shared by every worker,
	// which must serve every task type.
	ConsumersByPriority = "priority"
	// ConsumersByType: one durable consumer per priority and served type
	// pattern (Names.TypeConsumer), made by the workers that serve the
	// pattern from the template recorded on SPOOL_TASKS. A task whose type
	// no consumer matches stays queued until a worker serving it starts.
	ConsumersByType = "type"
)

// Metadata keys of SPOOL_TASKS: how workers pull, and in ConsumersByType
// the settings of the consumers the workers make.
const (
	ConsumersKey     = "spool_consumers"
	AckWaitKey       = "spool_ack_wait"
	MaxDeliverKey    = "spool_max_deliver"
	MaxAckPendingKey = "spool_max_ack_pending"
)

// ConsumersOf reads how workers pull from SPOOL_TASKS's configuration:
// ConsumersByPriority when nothing is recorded, as on a stream provisioned
// before the mode was a setting.
func ConsumersOf(taskStream jetstream.StreamConfig) string {
	if taskStream.Metadata[ConsumersKey] == ConsumersByType {
		return ConsumersByType
	}
	return ConsumersByPriority
}

// metadata is what SPOOL_TASKS records about the topology.
func (t Topology) metadata() map[string]string {
	md := map[string]string{}
	if t.Settings.Partitions > 1 {
		md[PartitionsKey] = strconv.Itoa(t.Settings.Partitions)
	}
	if t.Settings.Consumers == ConsumersByPriority {
		md[ConsumersKey] = ConsumersByPriority
	}
	if t.Settings.Consumers == ConsumersByType {
		md[ConsumersKey] = ConsumersByType
		md[AckWaitKey] = t.Settings.AckWait.String()
		md[MaxDeliverKey] = strconv.Itoa(t.Settings.MaxDeliver)
		md[MaxAckPendingKey] = strconv.Itoa(t.Settings.MaxAckPending)
	}
	if len(md) == 0 {
		return nil
	}
	return md
}

// TypeConsumerConfig is the durable consumer of priority p for the task
// types matching pattern, with the settings recorded on SPOOL_TASKS
// (taskStream, its configuration; the defaults where one is missing).
func TypeConsumerConfig(names spool.Names, taskStream jetstream.StreamConfig, p spool.Priority, pattern string) jetstream.ConsumerConfig {
	s := templateSettings(taskStream)
	return jetstream.ConsumerConfig{
		Durable:       names.TypeConsumer(p, pattern),
		Description:   "Spool workers pulling " + p.String() + " tasks of " + pattern,
		FilterSubject: names.TypeFilter(p, pattern),
		DeliverPolicy: jetstream.DeliverAllPolicy,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       s.AckWait,
		MaxDeliver:    s.MaxDeliver,
		MaxAckPending: s.MaxAckPending,
		MaxWaiting:    512,
		ReplayPolicy:  jetstream.ReplayInstantPolicy,
	}
}

// templateSettings reads the consumer settings SPOOL_TASKS records for
// the type consumers, the defaults where one is missing.
func templateSettings(taskStream jetstream.StreamConfig) Settings {
	s := DefaultSettings()
	md := taskStream.Metadata
	if d, err := time.ParseDuration(md[AckWaitKey]); err == nil && d > 0 {
		s.AckWait = d
	}
	if n, err := strconv.Atoi(md[MaxDeliverKey]); err == nil && n > 0 {
		s.MaxDeliver = n
	}
	if n, err := strconv.Atoi(md[MaxAckPendingKey]); err == nil && n > 0 {
		s.MaxAckPending = n
	}
	return s
}

// TypePatterns lists by priority the type patterns of the type consumers
// (Names.TypeConsumer) on one task stream; other consumers are left out.
// It reads the consumer names only.
func TypePatterns(ctx context.Context, stream jetstream.Stream, names spool.Names) ([len(spool.Priorities)][]string, error) {
	var patterns [len(spool.Priorities)][]string
	list := stream.ConsumerNames(ctx)
	for c := range list.Name() {
		if p, pattern, ok := names.ParseTypeConsumer(c); ok {
			patterns[p] = append(patterns[p], pattern)
		}
	}
	if err := list.Err(); err != nil {
		return patterns, fmt.Errorf("listing the consumers of %s: %w", stream.CachedInfo().Config.Name, err)
	}
	return patterns, nil
}
