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
func (d *dispatcher) bindPartitions(ctx context.Context, js jetstream.JetStream, bind jsproto.Tries) error {
	names := d.o.Names
	err := bind.Do(ctx, "binding task stream "+names.TaskStream(), func(ctx context.Context) (err error) {
		d.tasks, err = js.Stream(ctx, names.TaskStream())
		return err
	})
	if err != nil {
		return bindError("stream", names.TaskStream(), err)
	}
	k := streams.PartitionsOf(d.tasks.CachedInfo().Config)
	d.parts = []int{d.o.Partition}
	if d.o.Partition == allPartitions {
		d.parts = d.parts[:0]
		for i := range k {
			d.parts = append(d.parts, i)
		}
	} else if d.o.Partition >= k {
		d.log.WarnContext(ctx, "pinned to a partition the topology does not record: binding it anyway", "partition", d.o.Partition, "partitions", k)
	}
	d.lanes = make([]lane, len(d.parts)*numPriorities)
	d.laneCaps, d.resting = make([]int, len(d.lanes)), make([]bool, len(d.lanes))
	d.split = make([]int, len(d.parts))
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
		for _, p := range spool.Priorities {
			var c jetstream.Consumer
			err := bind.Do(ctx, "binding consumer "+names.Consumer(p)+" of "+stream.CachedInfo().Config.Name, func(ctx context.Context) (err error) {
				c, err = stream.Consumer(ctx, names.Consumer(p))
				return err
			})
			if err != nil {
				return bindError("consumer", stream.CachedInfo().Config.Name+" "+names.Consumer(p), err)
			}
			d.lanes[laneOf(j, p)] = lane{stream: stream, cons: c}
			cfg := c.CachedInfo().Config
			d.ackWait[p] = lowest(d.ackWait[p], cfg.AckWait)
			d.maxDeliver[p] = lowest(d.maxDeliver[p], cfg.MaxDeliver)
			d.maxAckPend[p] = lowest(d.maxAckPend[p], cfg.MaxAckPending)
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
