package consumer

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/spoolq/spool/consumer/flow"
	spool "github.com/spoolq/spool/shared"
	"github.com/spoolq/spool/shared/jsproto"
	"github.com/spoolq/spool/shared/limits"
)

// A task handed back by a limit that booked its return (a rate limit)
// comes back deferEarly before the booked time (at least deferBase from
// now). Else the delay grows with its hand-backs,
// min(deferBase·2^deferrals, deferMax) plus up to half of it again.
const (
	deferBase   = 100 * time.Millisecond
	deferMax    = 5 * time.Second
	deferJitter = 0.5
	deferEarly  = 300 * time.Millisecond
)

// startFlow binds the flow-control limiter. A deployment provisioned
// before flow control has no buckets for it: the worker then runs without
// limits.
func (w *Worker) startFlow(ctx context.Context) error {
	ttl := time.Duration(0)
	for _, d := range w.ackWait {
		if d > 0 && (ttl == 0 || d < ttl) {
			ttl = d
		}
	}
	// Rides out an election like the other bindings of Start; missing
	// buckets fail at once.
	bind := jsproto.Retry{PerTry: min(w.o.IOTimeout, jsproto.DefaultPerTry), Logger: w.log}
	var l *flow.Limiter
	err := bind.Do(ctx, "binding the flow-control buckets", func(ctx context.Context) (err error) {
		l, err = flow.New(ctx, flow.Config{
			JS: w.js, Conn: w.nc, Names: w.o.Names, Owner: w.o.WorkerName,
			TTL: ttl, IOTimeout: w.o.IOTimeout, Logger: w.log,
		})
		return err
	})
	if errors.Is(err, flow.ErrNotProvisioned) {
		w.log.WarnContext(ctx, "flow control off: provision the topology again to create its buckets", "error", err)
		return nil
	}
	if err != nil {
		return err
	}
	w.mu.Lock()
	w.flow = l
	w.mu.Unlock()
	err = bind.Do(ctx, "binding the task stream for ordered keys", func(ctx context.Context) (err error) {
		w.turns, err = limits.NewTurns(ctx, w.js, w.o.Names)
		return err
	})
	if err != nil {
		l.Close()
		return err
	}
	w.kickSem = make(chan struct{}, kickParallel)
	if w.kickSub, err = w.nc.QueueSubscribe(w.o.Names.KickFilter(), kickQueue, w.onKick); err != nil {
		l.Close()
		return fmt.Errorf("subscribing to kick requests: %w", err)
	}
	w.sweepStop, w.sweepDone = make(chan struct{}), make(chan struct{})
	go w.sweepHeld(w.sweepStop, w.sweepDone)
	return nil
}

// closeFlow ends the kick subscription, the sweep of held keys and the
// limiter (each may be off).
func (w *Worker) closeFlow() {
	if w.kickSub != nil {
		_ = w.kickSub.Unsubscribe()
		w.kicking.Wait()
	}
	if w.sweepStop != nil {
		close(w.sweepStop)
		<-w.sweepDone
		w.sweepStop = nil
	}
	w.flow.Close()
}

// admitFlow takes the leases the flow-control rule of the task's type asks
// for, taking over the slot grant carried when it left a waiting room
// (used up either way). When a concurrency limit is full, it parks the
// task in the limit's waiting room; when a rate limit is full (or the
// leases cannot be read), it hands the task back for later. Either way it
// returns false: the attempt is over, and it cost the task none of its
// attempts.
func (w *Worker) admitFlow(a attemptInfo, meta spool.Meta, grants *[]flow.Grant) (*flow.Lease, bool) {
	if w.flow == nil {
		return nil, true
	}
	gs := *grants
	*grants = nil
	// A type without a rule (the local view of the rules) takes no lease:
	// no context, no round trip.
	if rule, ok := w.flow.Rule(a.typ); !ok || !rule.Limits() {
		w.flow.Drop(w.ioCtx, gs...)
		return nil, true
	}
	ctx, cancel := context.WithTimeout(w.ioCtx, w.admitTimeout(a.p))
	defer cancel()
	lease, err := w.flow.AcquireGranted(ctx, a.typ, meta.Key, a.id, gs)
	if err == nil {
		return lease, true
	}
	var denied *flow.DeniedError
	wait := time.Duration(0)
	if errors.As(err, &denied) {
		if (denied.Limit == "concurrency" || denied.Limit == "key_concurrency") && w.flow.CanPark() {
			w.waitForSlot(a, meta, denied)
			return nil, false
		}
		// Handed back: the key's slot it took goes on.
		w.flow.Drop(w.ioCtx, denied.Kept...)
		wait = denied.RetryAfter
	} else {
		w.log.Warn("flow-control leases unavailable; handing the task back", "task_id", a.id, "type", a.typ, "error", err)
	}
	delay := jitter(backoff(deferBase, deferMax, meta.Deferrals+1), deferJitter)
	if wait > 0 {
		// The limit booked the task's return: come back a little early
		// (schedules fire in clumps a few hundred milliseconds apart) and
		// wait for the turn in the worker.
		delay = max(deferBase, wait-deferEarly)
	}
	w.deferTask(a, meta, delay)
	return nil, false
}

// waitForSlot parks a task of a full concurrency limit in the limit's
// waiting room (flow.Limiter.Park) and acks it; a slot released later is
// handed to it there, in arrival order. Then it takes a slot freed
// meanwhile for the room's oldest task (a releaser that found the room
// empty just before the park freed it). If the park fails the task is
// handed back instead. A crash between the park and the ack runs the task
// twice (at least once).
func (w *Worker) waitForSlot(a attemptInfo, meta spool.Meta, denied *flow.DeniedError) {
	m := &nats.Msg{Subject: a.msg.Subject(), Header: handBackHeader(a, meta), Data: a.msg.Data()}
	id := a.id + "-room-" + strconv.FormatUint(a.seq, 10)
	err := w.settleWrite(a, "parking for a concurrency slot", func(ctx context.Context) error {
		return w.flow.Park(ctx, denied, meta.Key, id, m)
	})
	if err != nil {
		w.log.Warn("parking a task of a full concurrency limit failed; handing it back", "task_id", a.id, "type", a.typ, "error", err)
		w.flow.Drop(w.ioCtx, denied.Kept...)
		w.deferTask(a, meta, jitter(backoff(deferBase, deferMax, meta.Deferrals+1), deferJitter))
		return
	}
	if err := a.msg.Ack(); err != nil {
		w.log.Warn("acking a task parked for a concurrency slot", "task_id", a.id, "error", err)
	}
	w.log.Debug("task parked: concurrency limit full", "task_id", a.id, "type", a.typ, "limit", denied.Limit)
	ctx, cancel := context.WithTimeout(w.ioCtx, w.o.IOTimeout)
	defer cancel()
	w.flow.Wake(ctx, denied, meta.Key)
}

// admitTimeout bounds flow-control admission. Nothing heartbeats the task
// before it runs: admission must end well within the ack wait, or the
// task would be delivered again meanwhile.
func (w *Worker) admitTimeout(p spool.Priority) time.Duration {
	admit := w.o.IOTimeout
	if aw := w.ackWait[p]; aw > 0 {
		admit = min(admit, aw/3)
	}
	return admit
}

// deferTask hands a task back for delay without spending a delivery: it
// publishes a copy as a one-shot schedule on the task's schedule subject,
// carrying the attempts used so far (Spool-Prior-Attempts) and the count
// of hand-backs (Spool-Deferrals), and then acks the delivered message.
// The copy fires onto the task's own subject after delay, behind the tasks
// queued meanwhile, so a waiting task never blocks other types or keys. A
// crash between the publish and the ack runs the task twice (at least
// once); if the publish fails the task is NAKed with the delay instead,
// which costs one delivery.
func (w *Worker) deferTask(a attemptInfo, meta spool.Meta, delay time.Duration) {
	h := handBackHeader(a, meta)
	h.Set(spool.HeaderDeferrals, strconv.Itoa(meta.Deferrals+1))
	h.Set(spool.HeaderSchedule, spool.FormatScheduleAt(time.Now().Add(delay)))
	h.Set(spool.HeaderScheduleTarget, a.msg.Subject())
	h.Set(spool.HeaderMsgID, fmt.Sprintf("%s-flow-%d", a.id, a.seq))
	subj, err := w.o.Names.SchedSubject(a.id)
	if err == nil {
		// Through an election like a settling write; Nats-Msg-Id makes a
		// retried publish store one copy.
		m := &nats.Msg{Subject: subj, Header: h, Data: a.msg.Data()}
		err = w.settleWrite(a, "hand-back for flow control", func(ctx context.Context) error {
			_, err := w.js.PublishMsg(ctx, m)
			return err
		})
	}
	if err != nil {
		w.log.Warn("handing a limited task back failed; it returns after a NAK delay", "task_id", a.id, "error", err)
		w.nak(a, delay)
		return
	}
	if err := a.msg.Ack(); err != nil {
		w.log.Warn("acking a task handed back for flow control", "task_id", a.id, "error", err)
	}
	w.log.Debug("task handed back: flow-control limit full", "task_id", a.id, "type", a.typ, "delay", delay)
}

// handBackHeader is the header of a copy of the task that a worker
// republishes (a hand-back, a park): the task's own headers without
// JetStream's, its id, the attempts it used so far
// (Spool-Prior-Attempts), so the copy costs none of its retries, and its
// first enqueue time (Spool-Enqueued-At), so the copy keeps it.
func handBackHeader(a attemptInfo, meta spool.Meta) nats.Header {
	h := nats.Header{}
	for k, vs := range a.msg.Headers() {
		if lk := strings.ToLower(k); strings.HasPrefix(lk, "nats-") ||
			lk == strings.ToLower(spool.HeaderPriorAttempts) || lk == strings.ToLower(spool.HeaderDeferrals) ||
			lk == strings.ToLower(spool.HeaderSlot) {
			continue
		}
		h[k] = vs
	}
	h.Set(spool.HeaderTaskID, a.id)
	h.Set(spool.HeaderPriorAttempts, strconv.Itoa(a.attempt-1))
	spool.KeepEnqueuedAt(h, a.enq)
	if meta.Deferrals > 0 {
		h.Set(spool.HeaderDeferrals, strconv.Itoa(meta.Deferrals))
	}
	return h
}
