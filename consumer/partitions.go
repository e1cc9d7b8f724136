package consumer

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	spool "github.com/spoolq/spool/shared"
	"github.com/spoolq/spool/shared/jsproto"
	"github.com/spoolq/spool/shared/workflow"
	"github.com/spoolq/spool/streams"
)

// allPartitions is config.Partition when the worker pulls every partition
// of the topology (the default).
const allPartitions = -1

// bindPartitions binds SPOOL_TASKS, reads how many task partitions the
// topology has (streams.PartitionsOf) and how workers pull
// (streams.ConsumersOf), and binds the streams and consumers of the
// partitions the worker pulls: all of them, or the one of WithPartition.
// Pulling by priority, each partition's five priority consumers are five
// lanes; pulling by type, each partition has five lanes per pattern the
// worker serves (h's, or WithTypes'), their consumers made if missing. All
// lanes share one scheduler.
func (d *dispatcher) bindPartitions(ctx context.Context, js jetstream.JetStream, bind jsproto.Tries, h Handler) error {
	names := d.o.Names
	err := bind.Do(ctx, "binding task stream "+names.TaskStream(), func(ctx context.Context) (err error) {
		d.tasks, err = js.Stream(ctx, names.TaskStream())
		return err
	})
	if err != nil {
		return bindError("stream", names.TaskStream(), err)
	}
	taskCfg := d.tasks.CachedInfo().Config
	k := streams.PartitionsOf(taskCfg)
	d.parts = []int{d.o.Partition}
	if d.o.Partition == allPartitions {
		d.parts = d.parts[:0]
		for i := range k {
			d.parts = append(d.parts, i)
		}
	} else if d.o.Partition >= k {
		d.log.WarnContext(ctx, "pinned to a partition the topology does not record: binding it anyway", "partition", d.o.Partition, "partitions", k)
	}
	patterns := []string{""} // the priority consumers
	if streams.ConsumersOf(taskCfg) == streams.ConsumersByType {
		if d.patterns, err = patternsFor(d.o, h); err != nil {
			return err
		}
		if d.patterns, err = d.dropDeniedSubmissions(ctx, js, bind, taskCfg, d.patterns); err != nil {
			return err
		}
		patterns = d.patterns
	}
	d.groups = len(d.parts) * len(patterns)
	d.lanes = make([]lane, d.groups*numPriorities)
	d.laneCaps, d.resting = make([]int, len(d.lanes)), make([]bool, len(d.lanes))
	d.split = make([]int, d.groups)
	for j, part := range d.parts {
		stream := d.tasks
		if part != 0 {
			name := names.PartitionStream(part)
			err := bind.Do(ctx, "binding task stream "+name, func(ctx context.Context) (err error) {
				stream, err = js.Stream(ctx, name)
				return err
			})
			if err != nil {
				return bindError("stream", name, err)
			}
		}
		for q, pattern := range patterns {
			for _, p := range spool.Priorities {
				c, err := d.bindConsumer(ctx, js, bind, stream, taskCfg, p, pattern)
				if err != nil {
					return err
				}
				cfg := c.CachedInfo().Config
				d.lanes[laneOf(j*len(patterns)+q, p)] = lane{stream: stream, cons: c, prioState: prioState{maxAck: cfg.MaxAckPending}}
				d.ackWait[p] = lowest(d.ackWait[p], cfg.AckWait)
				d.maxDeliver[p] = lowest(d.maxDeliver[p], cfg.MaxDeliver)
			}
		}
	}
	return nil
}

// dropDeniedSubmissions leaves workflow submissions out of the patterns
// served when the worker's role may not pull them: a role narrowed to one
// service's types (deploy/nats/auth.conf) runs that service's tasks, and
// the workers of another role take the submissions.
func (d *dispatcher) dropDeniedSubmissions(ctx context.Context, js jetstream.JetStream, bind jsproto.Tries, taskCfg jetstream.StreamConfig, patterns []string) ([]string, error) {
	i := slices.Index(patterns, workflow.SubmitType)
	if i < 0 {
		return patterns, nil
	}
	_, err := d.bindConsumer(ctx, js, bind, d.tasks, taskCfg, spool.Critical, workflow.SubmitType)
	if errors.Is(err, jsproto.ErrDenied) {
		d.log.WarnContext(ctx, "this worker's role may not pull workflow submissions: it leaves them to other workers", "error", err)
		return slices.Delete(slices.Clone(patterns), i, i+1), nil
	}
	return patterns, err
}

// lowest is the lower of two limits where zero or less means none.
func lowest[T int | time.Duration](cur, v T) T {
	switch {
	case v <= 0:
		return cur
	case cur <= 0:
		return v
	default:
		return min(cur, v)
	}
}
