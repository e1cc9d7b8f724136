package consumer

// The dispatcher's refresh: once a RefreshInterval it reads the consumers
// of lanes that have no long-poll outstanding, for their backlog and their
// pause, and reconsiders the pool size.

import (
	"context"
	"errors"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/spoolq/spool/streams"
)

// refreshLoop reads the backlog of priorities that have no long-poll
// outstanding, and reconsiders the pool size.
func (d *dispatcher) refreshLoop() {
	defer d.loops.Done()
	t := time.NewTicker(d.o.RefreshInterval)
	defer t.Stop()
	for {
		select {
		case <-d.stopping:
			return
		case <-t.C:
		}
		d.pl.expire(false)
		d.beatQueued()
		d.onRefresh()
		d.refresh()
		d.scaleDown()
		d.nudge()
	}
}

func (d *dispatcher) refresh() {
	for i := range d.lanes {
		ln := &d.lanes[i] // stream and cons are fixed after Start
		p := lanePriority(i)
		d.mu.Lock()
		skip := d.pl.polling(i) || ln.retired
		local := ln.busy
		d.mu.Unlock()
		if skip {
			continue
		}
		ctx, cancel := context.WithTimeout(d.ioCtx, d.o.IOTimeout)
		info, err := ln.cons.Info(ctx)
		var oldest time.Time
		if err == nil && info.NumPending > 0 {
			oldest, err = streams.OldestWaiting(ctx, ln.stream, info)
		}
		cancel()
		stream := ln.stream.CachedInfo().Config.Name
		if err != nil {
			if errors.Is(err, jetstream.ErrConsumerNotFound) && d.retireIfSwitched(i) {
				continue
			}
			if !d.isStopping() {
				d.log.Warn("reading consumer state", "stream", stream, "priority", p.String(), "error", err)
			}
			continue
		}
		d.mu.Lock()
		st := &ln.prioState
		if !d.pl.polling(i) {
			st.pending = info.NumPending
			st.maybe = info.NumAckPending > local
			st.oldest = oldest
		}
		pauseChanged := st.paused != info.Paused
		st.paused = info.Paused
		// A consumer capped by its type's concurrency limit is meant to
		// reach its MaxAckPending.
		maxAck := st.maxAck
		if st.limit > 0 {
			maxAck = 0
		}
		high := maxAck > 0 && info.NumAckPending >= maxAck*9/10
		warn := high && !st.ackPendingHigh
		st.ackPendingHigh = high
		d.mu.Unlock()
		if pauseChanged {
			d.log.Info("priority pause changed", "stream", stream, "priority", p.String(), "paused", info.Paused)
		}
		if warn {
			d.log.Warn("priority near MaxAckPending: tasks in retry backoff count against it, and at the limit the server delivers no fresh task of this priority; raise SPOOL_MAX_ACK_PENDING",
				"stream", stream, "priority", p.String(), "ack_pending", info.NumAckPending, "max_ack_pending", maxAck)
		}
	}
}

// lane is one priority consumer of one task partition: what the worker
// pulls from. Its state is guarded by the worker's mu.
type lane struct {
	stream jetstream.Stream // the partition's stream
	cons   jetstream.Consumer
	prioState
}

// prioState is what the worker knows about one lane (a priority of a
// partition).
type prioState struct {
	// busy is the slots running an attempt of the lane's tasks.
	busy int
	// held is the lane's tasks in this worker: running or queued.
	held int
	// maxAck is the consumer's MaxAckPending as the worker last set or
	// read it; limit is its concurrency cap (see capLanes), 0 for none.
	maxAck, limit int
	// pending is the consumer's NumPending at the last pull or refresh:
	// tasks never delivered. 0 means the priority looks empty.
	pending uint64
	// maybe is set by a refresh when tasks are delivered but not acked
	// beyond this worker's own: some may be due for redelivery, which
	// NumPending does not count.
	maybe bool
	// oldest is the stream time of the oldest waiting task at the last
	// refresh; zero when none or unknown.
	oldest time.Time
	// ackPendingHigh is set while the consumer's unacked tasks (running
	// and in retry backoff) are near MaxAckPending, past which the server
	// stops delivering the priority.
	ackPendingHigh bool
	// restUntil pauses pulls of the priority after a failed one.
	restUntil time.Time
	// paused is set while the priority's consumer is paused (an operator's
	// pause, read at each refresh): nothing is pulled, so no slot waits
	// on it.
	paused bool
	// armed is set while a watch waits for a publish to the lane (see
	// wakeup.go); woken is set when one came and the lane was not pulled
	// since.
	armed, woken bool
	// retired is set when the lane's priority consumer was removed
	// because the deployment switched to pulling by type: the lane is
	// never pulled again (see retireIfSwitched).
	retired bool
}
