package streams

import (
	"time"

	"github.com/nats-io/nats.go/jetstream"

	spool "github.com/spoolq/spool/shared"
)

// uniqueMarkerTTL is how long the unique bucket keeps a marker when a key's
// TTL runs out; it enables per-key TTLs.
const uniqueMarkerTTL = time.Minute

// TaskStreamConfig is SPOOL_TASKS: the five priority filters, the
// delayed-task schedules (spool.sched.>) and the periodic schedules
// (spool.cron.>) and the tasks parked while their type is paused
// (spool.parked.>), outside every worker consumer's filter, WorkQueue retention, schedules and direct get on, no
// message or byte limits (see the package doc).
func (t Topology) TaskStreamConfig() jetstream.StreamConfig {
	subjects := make([]string, 0, len(spool.Priorities)+3)
	for _, p := range spool.Priorities {
		subjects = append(subjects, t.Names.PriorityFilter(p))
	}
	subjects = append(subjects, t.Names.SchedFilter(), t.Names.CronFilter(), t.Names.ParkedFilter())
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
	}
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
	return jetstream.StreamConfig{
		Name:              t.Names.AdvisoryStream(),
		Description:       "Spool MAX_DELIVERIES advisories for the DLQ router",
		Subjects:          []string{t.Names.AdvisoryFilter()},
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
