package consumer

import (
	"context"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	spool "github.com/spoolq/spool/shared"
	"github.com/spoolq/spool/shared/limits"
)

// orderRef is the place in its key's turn an attempt holds (limits.Turns).
type orderRef struct {
	key    string
	seq    uint64
	window int
	skip   bool // limits.OrderSkip: a failure passes the turn on
}

// kickQueue is the queue group of the workers' kick subscriptions: one
// worker of the fleet serves each kick request.
const kickQueue = "spool-kick"

// kickParallel is how many kick requests a worker serves at once: a
// producer's batch over many keys sends a kick per key, and each kick is a
// few round trips.
const kickParallel = 16

// onKick serves a kick request (Names.KickSubject) of a producer that
// parked tasks: it releases the key's held tasks while its window has
// room, in a goroutine of its own (at most kickParallel at once; beyond
// that the subscription waits).
func (w *Worker) onKick(m *nats.Msg) {
	token, typ, err := w.o.Names.ParseKickSubject(m.Subject)
	var key string
	if err == nil {
		key, err = limits.DecodeKey(token)
	}
	if err != nil {
		w.log.Warn("ignoring a kick request", "subject", m.Subject, "error", err)
		return
	}
	w.kickSem <- struct{}{}
	w.kicking.Add(1)
	go func() {
		defer func() { <-w.kickSem; w.kicking.Done() }()
		rule, _ := w.flow.Rule(typ)
		ctx, cancel := context.WithTimeout(w.ioCtx, w.o.IOTimeout)
		defer cancel()
		// A rule lifted meanwhile still drains the key, one at a time.
		if err := w.turns.Kick(ctx, typ, key, max(1, rule.KeyWindow(key))); err != nil {
			w.log.Warn("starting an ordered key", "type", typ, "key", key, "error", err)
		}
	}()
}

// heldSweepEvery is how often a worker looks for held keys with room in
// their window (heldSweepMax at most per look): it starts the keys whose
// kick request no worker heard (none ran, or it was lost in a
// reconnect), and the waiting rooms of concurrency limits whose wake-up
// was lost.
const (
	heldSweepEvery = 5 * time.Second
	heldSweepMax   = 256
)

// sweepHeld kicks the keys that have held tasks, and pumps the waiting
// rooms of the concurrency limits that have, every heldSweepEvery
// (with jitter, so the fleet's looks spread out), until stop closes.
func (w *Worker) sweepHeld(stop <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	t := time.NewTimer(jitter(heldSweepEvery/5, 1))
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		w.kickHeldKeys()
		t.Reset(jitter(heldSweepEvery, deferJitter))
	}
}

// kickHeldKeys kicks up to heldSweepMax keys that have held tasks, and
// pumps the waiting rooms among them (flow.Limiter.Pump).
func (w *Worker) kickHeldKeys() {
	ctx, cancel := context.WithTimeout(w.ioCtx, heldSweepEvery)
	defer cancel()
	info, err := w.tasks.Info(ctx, jetstream.WithSubjectFilter(w.o.Names.HeldFilter()))
	if err != nil {
		w.log.Debug("looking for held keys", "error", err)
		return
	}
	n := 0
	for subj, count := range info.State.Subjects {
		if count == 0 {
			continue
		}
		if n++; n > heldSweepMax {
			return
		}
		token, typ, err := w.o.Names.ParseHeldSubject(subj)
		if err != nil {
			continue
		}
		if key, ok := limits.ParseRoomToken(token); ok {
			// A concurrency limit's waiting room: hand it the slots free
			// now (a slot that expired with its killed worker, a limit
			// raised or lifted).
			w.flow.Pump(ctx, typ, key)
			continue
		}
		key, err := limits.DecodeKey(token)
		if err != nil {
			continue
		}
		rule, _ := w.flow.Rule(typ)
		if err := w.turns.Kick(ctx, typ, key, max(1, rule.KeyWindow(key))); err != nil {
			w.log.Debug("starting a held key", "type", typ, "key", key, "error", err)
		}
	}
}

// orderWait is the delay of a task handed back because another task of
// its key holds the turn (a release raced the previous task's end).
const orderWait = 250 * time.Millisecond

// admitOrder applies per-key ordering and fairness (limits.Rule.Ordered,
// Fair) before the limits: a keyed task of such a type that has not
// passed its key's held subject is parked there (and acked), a released
// task runs when it holds a place in its key's turn (or gave it up) and is
// handed back otherwise. It returns false when the attempt is over.
func (w *Worker) admitOrder(a *attemptInfo, meta spool.Meta) bool {
	if w.turns == nil || meta.Key == "" {
		return true
	}
	rule, _ := w.flow.Rule(a.typ)
	seq, released := limits.OrderSeq(a.msg.Headers())
	window := rule.KeyWindow(meta.Key)
	if !released && window == 0 {
		return true
	}
	ctx, cancel := context.WithTimeout(w.ioCtx, w.admitTimeout(a.p))
	defer cancel()
	if !released {
		return w.holdForTurn(ctx, *a, meta, window)
	}
	d, err := w.turns.Admit(ctx, a.typ, meta.Key, window, seq)
	if err != nil {
		w.log.Warn("reading the turn of an ordered key; handing the task back", "task_id", a.id, "type", a.typ, "error", err)
		w.deferTask(*a, meta, jitter(backoff(deferBase, deferMax, meta.Deferrals+1), deferJitter))
		return false
	}
	if d == limits.WaitTurn {
		w.deferTask(*a, meta, jitter(orderWait, deferJitter))
		return false
	}
	// Also a task run outside the turn (RunFree) finishes: its Finish
	// kicks the key, which a worker killed after giving up the task's
	// place may not have done. A rule lifted meanwhile still passes the
	// turn on (window 0 is 1), so the key's parked tasks are not stranded.
	a.order = &orderRef{key: meta.Key, seq: seq, window: window, skip: rule.Ordered == limits.OrderSkip}
	return true
}

// holdForTurn moves a keyed task of an ordered or fair type that reached its
// task subject directly (enqueued before the rule, fired by a schedule, published by a
// client unaware of the rule) to its key's held subject, and acks it.
func (w *Worker) holdForTurn(ctx context.Context, a attemptInfo, meta spool.Meta, window int) bool {
	h := handBackHeader(a, meta)
	_, err := w.turns.Park(ctx, a.typ, meta.Key, window, a.msg.Subject(), a.id+"-held-"+strconv.FormatUint(a.seq, 10),
		&nats.Msg{Header: h, Data: a.msg.Data()})
	if err != nil {
		// The held copy may be stored already: the redelivery parks it
		// again as a duplicate (same Nats-Msg-Id) and starts the key.
		w.log.Warn("parking an ordered task failed; it returns after a NAK delay", "task_id", a.id, "type", a.typ, "error", err)
		w.nak(a, jitter(backoff(deferBase, deferMax, meta.Deferrals+1), deferJitter))
		return false
	}
	if err := a.msg.Ack(); err != nil {
		w.log.Warn("acking a task parked for its key's turn", "task_id", a.id, "error", err)
	}
	w.log.Debug("task parked for its key's turn", "task_id", a.id, "type", a.typ)
	return false
}

// finishOrder passes the key's turn on before the task's message is
// settled for good (or, with OrderSkip, retried).
func (w *Worker) finishOrder(a attemptInfo) error {
	if a.order == nil {
		return nil
	}
	return w.settleWrite(a, "passing the turn of task "+a.id, func(ctx context.Context) error {
		return w.turns.Finish(ctx, a.typ, a.order.key, a.order.window, a.order.seq)
	})
}
