package streams

import (
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	spool "github.com/spoolq/spool/shared"
)

// uniqueMarkerTTL is how long the unique bucket keeps a marker when a key's
// TTL runs out; it enables per-key TTLs.
const uniqueMarkerTTL = time.Minute

// TaskStreamConfig is SPOOL_TASKS: the five priority filters, the
// delayed-task schedules (spool.sched.>) and the periodic schedules
// (spool.cron.>), the tasks parked while their type is paused
// (spool.parked.>) and the tasks of ordered keys waiting for their turn
// (spool.held.>), outside every worker consumer's filter, WorkQueue retention, schedules and direct get on, no
// message or byte limits (see the package doc).
func (t Topology) TaskStreamConfig() jetstream.StreamConfig {
	subjects := make([]string, 0, len(spool.Priorities)+4)
	for _, p := range spool.Priorities {
		subjects = append(subjects, t.Names.PriorityFilter(p))
	}
	subjects = append(subjects, t.Names.SchedFilter(), t.Names.CronFilter(), t.Names.ParkedFilter(), t.Names.HeldFilter())
	return jetstream.StreamConfig{
		Name:              t.Names.TaskStream(),
		Description:       "Spool queued tasks, one subject tree per priority, and pending schedules",
		Subjects:          subjects,
		Retention:         jetstream.WorkQueuePolicy,
		Discard:           jetstream.DiscardOld,
		MaxMsgs:           -1,
		MaxBytes:          -1,
		MaxAge:            0,
		MaxMsgsPerSubject: -1,
		MaxConsumers:      -1,
		MaxMsgSize:        t.Settings.MaxMsgSize,
		Storage:           t.Settings.storage(),
		Replicas:          t.Settings.Replicas,
		Duplicates:        t.Settings.DuplicateWindow,
		AllowDirect:       true,
		AllowMsgSchedules: true,
		Metadata:          t.metadata(),
	}
}

// PartitionsKey is the metadata key of SPOOL_TASKS that records how many
// task partitions the topology has (absent: one).
const PartitionsKey = "spool_partitions"

// PartitionStreamConfig is task partition k's stream. With one partition
// it is TaskStreamConfig. With K > 1, every partition k listens on
// spool.part.<k>.tasks.> (where the server's subject mapping sends a task
// publish) and stores the task back under spool.tasks.<priority>.<type>
// with a subject transform, so consumers, filters and subjects read as
// with one stream. Partition 0 is SPOOL_TASKS: it keeps the plain task
// subjects too (where due schedules land, and where tasks go while the
// server lacks the mapping), the schedule trees, and PartitionsKey.
func (t Topology) PartitionStreamConfig(k int) jetstream.StreamConfig {
	if t.Settings.Partitions <= 1 {
		return t.TaskStreamConfig()
	}
	src := t.Names.PartitionFilter(k)
	_, dst, _ := strings.Cut(src, ".tasks.")
	transform := &jetstream.SubjectTransformConfig{Source: src, Destination: t.Names.Prefix() + ".tasks." + dst}
	if k == 0 {
		c := t.TaskStreamConfig()
		c.Subjects = append(c.Subjects, src)
		c.SubjectTransform = transform
		return c
	}
	c := t.TaskStreamConfig()
	c.Name = t.Names.PartitionStream(k)
	c.Description = "Spool queued tasks, partition " + strconv.Itoa(k) + " of " + strconv.Itoa(t.Settings.Partitions)
	c.Subjects = []string{src}
	c.SubjectTransform = transform
	c.AllowMsgSchedules = false
	c.Metadata = nil
	return c
}

// PartitionsOf reads the partition count recorded on SPOOL_TASKS (1 when
// none is).
func PartitionsOf(taskStream jetstream.StreamConfig) int {
	k, err := strconv.Atoi(taskStream.Metadata[PartitionsKey])
	if err != nil || k < 1 {
		return 1
	}
	return k
}

// ConsumerConfig is the durable pull consumer of one priority.
func (t Topology) ConsumerConfig(p spool.Priority) jetstream.ConsumerConfig {
	return jetstream.ConsumerConfig{
		Durable:       t.Names.Consumer(p),
		Description:   "Spool workers pulling " + p.String() + " tasks",
		FilterSubject: t.Names.PriorityFilter(p),
		DeliverPolicy: jetstream.DeliverAllPolicy,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       t.Settings.AckWait,
		MaxDeliver:    t.Settings.MaxDeliver,
		MaxAckPending: t.Settings.MaxAckPending,
		MaxWaiting:    512,
		ReplayPolicy:  jetstream.ReplayInstantPolicy,
	}
}

// DLQStreamConfig is SPOOL_DLQ: browsable (Limits retention), never cleaned
// automatically, deduplicated so routing a dead letter twice stores it once.
func (t Topology) DLQStreamConfig() jetstream.StreamConfig {
	return jetstream.StreamConfig{
		Name:              t.Names.DLQStream(),
		Description:       "Spool dead letters, with the reason in Spool-Reason",
		Subjects:          []string{t.Names.DLQFilter()},
		Retention:         jetstream.LimitsPolicy,
		Discard:           jetstream.DiscardOld,
		MaxMsgs:           -1,
		MaxBytes:          -1,
		MaxMsgsPerSubject: -1,
		MaxConsumers:      -1,
		Storage:           t.Settings.storage(),
		Replicas:          t.Settings.Replicas,
		Duplicates:        t.Settings.DuplicateWindow,
		AllowDirect:       true,
	}
}

// AdvisoryStreamConfig is SPOOL_ADVISORIES: it keeps MAX_DELIVERIES
// advisories until the DLQ router has handled them.
func (t Topology) AdvisoryStreamConfig() jetstream.StreamConfig {
	subjects := []string{t.Names.AdvisoryFilter()}
	for k := 1; k < t.Settings.Partitions; k++ {
		subjects = append(subjects, t.Names.PartitionAdvisoryFilter(k))
	}
	return jetstream.StreamConfig{
		Name:              t.Names.AdvisoryStream(),
		Description:       "Spool MAX_DELIVERIES advisories for the DLQ router",
		Subjects:          subjects,
		Retention:         jetstream.WorkQueuePolicy,
		Discard:           jetstream.DiscardOld,
		MaxMsgs:           -1,
		MaxBytes:          -1,
		MaxMsgsPerSubject: -1,
		MaxConsumers:      -1,
		Storage:           t.Settings.storage(),
		Replicas:          t.Settings.Replicas,
		Duplicates:        t.Settings.DuplicateWindow,
	}
}

// RouterConsumerConfig is the DLQ router's durable consumer on the advisory
// stream. Several routers may share it.
func (t Topology) RouterConsumerConfig() jetstream.ConsumerConfig {
	return jetstream.ConsumerConfig{
		Durable:       t.Names.RouterConsumer(),
		Description:   "Spool DLQ router: moves tasks that ran out of deliveries to the DLQ",
		DeliverPolicy: jetstream.DeliverAllPolicy,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       30 * time.Second,
		MaxDeliver:    -1,
		MaxAckPending: 1000,
		MaxWaiting:    512,
		ReplayPolicy:  jetstream.ReplayInstantPolicy,
	}
}

// ResultsConfig is the spool_results bucket: one document per task id,
// expiring after ResultTTL.
func (t Topology) ResultsConfig() jetstream.KeyValueConfig {
	return jetstream.KeyValueConfig{
		Bucket:      t.Names.ResultsBucket(),
		Description: "Spool task results and states, key = task id",
		History:     1,
		Storage:     t.Settings.storage(),
		Replicas:    t.Settings.Replicas,
	}
}

// UniqueConfig is the spool_unique bucket: Create with a per-key TTL holds a
// unique key while its task lives.
func (t Topology) UniqueConfig() jetstream.KeyValueConfig {
	return jetstream.KeyValueConfig{
		Bucket:         t.Names.UniqueBucket(),
		Description:    "Spool unique-task keys, value = task id, per-key TTL",
		History:        1,
		Storage:        t.Settings.storage(),
		Replicas:       t.Settings.Replicas,
		LimitMarkerTTL: uniqueMarkerTTL,
	}
}

// CancelConfig is the spool_cancel bucket: one Cancellation document per
// cancelled task id, kept as long as result documents (ResultTTL).
func (t Topology) CancelConfig() jetstream.KeyValueConfig {
	return jetstream.KeyValueConfig{
		Bucket:      t.Names.CancelBucket(),
		Description: "Spool cancelled tasks, key = task id, value = who, why and when",
		History:     1,
		TTL:         t.Settings.ResultTTL,
		Storage:     t.Settings.storage(),
		Replicas:    t.Settings.Replicas,
	}
}

// PausedConfig is the spool_paused bucket: one spool.TypePause per paused
// task type, watched by every worker. It has no TTL: a pause lasts until
// resumed (or its until passes).
func (t Topology) PausedConfig() jetstream.KeyValueConfig {
	return jetstream.KeyValueConfig{
		Bucket:      t.Names.PausedBucket(),
		Description: "Spool paused task types, key = task type, value = who, why, when, until",
		History:     1,
		Storage:     t.Settings.storage(),
		Replicas:    t.Settings.Replicas,
	}
}

// LimitsConfig is the spool_limits bucket: one flow-control rule per task
// type (shared/limits.Rule), watched by every worker.
func (t Topology) LimitsConfig() jetstream.KeyValueConfig {
	return jetstream.KeyValueConfig{
		Bucket:      t.Names.LimitsBucket(),
		Description: "Spool flow-control rules, key = task type",
		History:     1,
		Storage:     t.Settings.storage(),
		Replicas:    t.Settings.Replicas,
	}
}

// LeasesConfig is the spool_leases bucket: concurrency slots and rate
// state, every key with a TTL so a crashed worker's lease ends on its own.
func (t Topology) LeasesConfig() jetstream.KeyValueConfig {
	return jetstream.KeyValueConfig{
		Bucket:         t.Names.LeasesBucket(),
		Description:    "Spool flow-control leases (concurrency slots, rate state), per-key TTL",
		History:        1,
		Storage:        t.Settings.storage(),
		Replicas:       t.Settings.Replicas,
		LimitMarkerTTL: uniqueMarkerTTL,
	}
}

// WorkflowsConfig is the spool_workflows bucket: one key per workflow and
// one per step, every change a compare-and-set. It has no TTL: a workflow
// may wait longer than any TTL for its steps, so its keys stay until deleted.
func (t Topology) WorkflowsConfig() jetstream.KeyValueConfig {
	return jetstream.KeyValueConfig{
		Bucket:      t.Names.WorkflowsBucket(),
		Description: "Spool workflows: <id>.wf and <id>.step.<name>, compare-and-set",
		History:     1,
		Storage:     t.Settings.storage(),
		Replicas:    t.Settings.Replicas,
	}
}
