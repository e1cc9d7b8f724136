package consumer

import (
	"context"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	spool "github.com/spoolq/spool/shared"
	"github.com/spoolq/spool/shared/jsproto"
	"github.com/spoolq/spool/streams"
)

// allPartitions is config.Partition when the worker pulls every partition
// of the topology (the default).
const allPartitions = -1

// bindPartitions binds SPOOL_TASKS, reads how many task partitions the
// topology has (streams.PartitionsOf), and binds the streams and priority
// consumers of the partitions the worker pulls: all of them, or the one
// of WithPartition. Each partition's five consumers become five lanes of
// one scheduler.
func (w *Worker) bindPartitions(ctx context.Context, bind jsproto.Tries) error {
	names := w.o.Names
	err := bind.Do(ctx, "binding task stream "+names.TaskStream(), func(ctx context.Context) (err error) {
		w.tasks, err = w.js.Stream(ctx, names.TaskStream())
		return err
	})
	if err != nil {
		return bindError("stream", names.TaskStream(), err)
	}
	k := streams.PartitionsOf(w.tasks.CachedInfo().Config)
	w.parts = []int{w.o.Partition}
	if w.o.Partition == allPartitions {
		w.parts = w.parts[:0]
		for i := range k {
			w.parts = append(w.parts, i)
		}
	} else if w.o.Partition >= k {
		w.log.WarnContext(ctx, "pinned to a partition the topology does not record: binding it anyway", "partition", w.o.Partition, "partitions", k)
	}
	w.lanes = make([]lane, len(w.parts)*numPriorities)
	w.laneCaps, w.resting = make([]int, len(w.lanes)), make([]bool, len(w.lanes))
	w.split = make([]int, len(w.parts))
	for j, part := range w.parts {
		stream := w.tasks
		if part != 0 {
			name := names.PartitionStream(part)
			err := bind.Do(ctx, "binding task stream "+name, func(ctx context.Context) (err error) {
				stream, err = w.js.Stream(ctx, name)
				return err
			})
			if err != nil {
				return bindError("stream", name, err)
			}
		}
		for _, p := range spool.Priorities {
			var c jetstream.Consumer
			err := bind.Do(ctx, "binding consumer "+names.Consumer(p)+" of "+stream.CachedInfo().Config.Name, func(ctx context.Context) (err error) {
				c, err = stream.Consumer(ctx, names.Consumer(p))
				return err
			})
			if err != nil {
				return bindError("consumer", stream.CachedInfo().Config.Name+" "+names.Consumer(p), err)
			}
			w.lanes[laneOf(j, p)] = lane{stream: stream, cons: c}
			cfg := c.CachedInfo().Config
			w.ackWait[p] = lowest(w.ackWait[p], cfg.AckWait)
			w.maxDeliver[p] = lowest(w.maxDeliver[p], cfg.MaxDeliver)
			w.maxAckPend[p] = lowest(w.maxAckPend[p], cfg.MaxAckPending)
		}
	}
	return nil
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
