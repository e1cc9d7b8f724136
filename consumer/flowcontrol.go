package consumer

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/spoolq/spool/consumer/flow"
	spool "github.com/spoolq/spool/shared"
	"github.com/spoolq/spool/shared/jsproto"
	"github.com/spoolq/spool/shared/limits"
	"github.com/spoolq/spool/streams"
)

// flowControl is the worker's side of flow control: the limits gate
// (leases, waiting rooms for full concurrency limits, hand-backs for full
// rates), the turns of ordered and fair keys, and the kick requests and
// sweeps that start held keys and waiting rooms. Its engine is package
// flow and the shared turns of package limits. With flow control off
// (a deployment provisioned before it) limiter and turns are nil and
// every task is admitted.
type flowControl struct {
	io      *taskIO
	limiter *flow.Limiter
	turns   *limits.Turns
	// tasks is SPOOL_TASKS, where the held subjects are.
	tasks     jetstream.Stream
	kickSub   *nats.Subscription // the fleet's kick requests (spool.kick.>)
	kickSem   chan struct{}      // bounds the kicks served at once
	kicking   sync.WaitGroup     // kicks being served
	sweepStop chan struct{}      // ends sweepHeld
	sweepDone chan struct{}
	// rules is signalled at each change of the rules in force;
	// followRules applies them until rulesStop closes.
	rules     chan struct{}
	rulesStop chan struct{}
	rulesDone chan struct{}
}

// startFlowControl binds the flow-control limiter and the turns of
// ordered keys, and starts serving kick requests. A deployment
// provisioned before flow control has no buckets for it: the worker then
// runs without limits.
func startFlowControl(ctx context.Context, io *taskIO, nc *nats.Conn, tasks jetstream.Stream, owner string) (*flowControl, error) {
	f := &flowControl{io: io, tasks: tasks, rules: make(chan struct{}, 1)}
	ttl := time.Duration(0)
	for _, d := range io.ackWait {
		if d > 0 && (ttl == 0 || d < ttl) {
			ttl = d
		}
	}
	// Rides out an election like the other bindings of Start; missing
	// buckets fail at once.
	bind := jsproto.Tries{PerTry: min(io.ioTimeout, jsproto.DefaultPerTry), Logger: io.log}
	var l *flow.Limiter
	err := bind.Do(ctx, "binding the flow-control buckets", func(ctx context.Context) (err error) {
		l, err = flow.New(ctx, flow.Config{
			JS: io.js, Conn: nc, Names: io.names, Owner: owner,
			TTL: ttl, IOTimeout: io.ioTimeout, Logger: io.log, OnRule: f.ruleChanged,
		})
		return err
	})
	if errors.Is(err, flow.ErrNotProvisioned) {
		io.log.WarnContext(ctx, "flow control off: provision the topology again to create its buckets", "error", err)
		return f, nil
	}
	if err != nil {
		return nil, err
	}
	var turns *limits.Turns
	err = bind.Do(ctx, "binding the task stream for ordered keys", func(ctx context.Context) (err error) {
		turns, err = limits.NewTurns(ctx, io.js, io.names)
		return err
	})
	if err != nil {
		l.Close()
		return nil, err
	}
	f.limiter, f.turns = l, turns
	f.kickSem = make(chan struct{}, kickParallel)
	if f.kickSub, err = nc.QueueSubscribe(io.names.KickFilter(), kickQueue, f.onKick); err != nil {
		l.Close()
		return nil, fmt.Errorf("subscribing to kick requests: %w", err)
	}
	f.sweepStop, f.sweepDone = make(chan struct{}), make(chan struct{})
	go f.sweepHeld(f.sweepStop, f.sweepDone)
	return f, nil
}

// close ends the kick subscription, the sweep of held keys and the
// limiter (each may be off).
func (f *flowControl) close() {
	if f == nil {
		return
	}
	if f.kickSub != nil {
		_ = f.kickSub.Unsubscribe()
		f.kicking.Wait()
	}
	if f.sweepStop != nil {
		close(f.sweepStop)
		<-f.sweepDone
		f.sweepStop = nil
	}
	if f.rulesStop != nil {
		close(f.rulesStop)
		<-f.rulesDone
		f.rulesStop = nil
	}
	f.limiter.Close()
}

// ruleChanged notes a change of the rules for followRules; it never
// blocks.
func (f *flowControl) ruleChanged() {
	select {
	case f.rules <- struct{}{}:
	default:
	}
}

// followRules runs apply with the rules in force now, and again after
// each change of them until close. With flow control off it does nothing.
func (f *flowControl) followRules(ctx context.Context, apply func(context.Context, streams.RuleOf)) {
	if f.limiter == nil {
		return
	}
	apply(ctx, f.limiter.Rule)
	f.rulesStop, f.rulesDone = make(chan struct{}), make(chan struct{})
	go func() {
		defer close(f.rulesDone)
		for {
			select {
			case <-f.rulesStop:
				return
			case <-f.rules:
				apply(f.io.ctx, f.limiter.Rule)
			}
		}
	}()
}

// stats are the limiter's counters by type, nil with flow control off.
func (f *flowControl) stats() map[string]flow.TypeStats {
	if f == nil || f.limiter == nil {
		return nil
	}
	return f.limiter.Stats()
}

// drop gives back the slots a task carried out of a waiting room and did
// not use.
func (f *flowControl) drop(gs []flow.Grant) {
	if f == nil || len(gs) == 0 {
		return
	}
	f.limiter.Drop(f.io.ctx, gs...)
}

// admit is the gate of flow control: the key's turn first (admitOrder),
// then the limits (admitLimits).
func (f *flowControl) admit(a *attemptInfo, meta spool.Meta) (bool, error) {
	return f.admitOrder(a, meta) && f.admitLimits(a, meta), nil
}

// admitLimits takes the leases the flow-control rule of the task's type
// asks for, taking over the slots the task carried out of a waiting room
// (used up either way). When a concurrency limit is full, it parks the
// task in the limit's waiting room; a task whose rate start is not due
// waits for it here (leaseContext), and when its rate line is full or the
// leases cannot be read, it hands the task back for later. Either way it
// returns false: the attempt is over, and it cost the task none of its
// attempts.
func (f *flowControl) admitLimits(a *attemptInfo, meta spool.Meta) bool {
	if f.limiter == nil {
		return true
	}
	gs := a.grants
	a.grants = nil
	// A type without a rule in the local view of the rules takes no
	// lease: no context, no round trip.
	rule, ok := f.limiter.Rule(a.typ)
	if !ok || !rule.Limits() {
		f.limiter.Drop(f.io.ctx, gs...)
		return true
	}
	budget := f.io.admitTimeout(a.p)
	ctx, done := f.leaseContext(a, rule, budget)
	// A task delivered through its type's own consumer was let through
	// by the limit's cap (capLanes): a slot frees for it in a moment.
	wait := time.Duration(0)
	if a.consumer == f.io.names.TypeConsumer(a.p, a.typ) {
		wait = min(capWait, budget/2)
	}
	lease, err := f.limiter.AcquireWaiting(ctx, a.typ, meta.Key, a.id, gs, wait)
	done()
	if err == nil {
		a.lease = lease
		return true
	}
	var denied *flow.DeniedError
	wait = 0
	if errors.As(err, &denied) {
		if (denied.Limit == "concurrency" || denied.Limit == "key_concurrency") && f.limiter.CanPark() {
			f.waitForSlot(*a, meta, denied)
			return false
		}
		// Handed back: the key's slot it took goes on.
		f.limiter.Drop(f.io.ctx, denied.Kept...)
		wait = denied.RetryAfter
	} else {
		f.io.log.Warn("flow-control leases unavailable; handing the task back", "task_id", a.id, "type", a.typ, "error", err)
	}
	delay := deferDelay(meta.Deferrals)
	if wait > 0 {
		// The limit booked the task's return: come back a little early,
		// since schedules fire in clumps a few hundred milliseconds apart,
		// and wait for the turn in the worker.
		delay = max(deferBase, wait-deferEarly)
	}
	f.io.handBack(*a, meta, delay)
	return false
}

// waitForSlot parks a task of a full concurrency limit in the limit's
// waiting room (flow.Limiter.Park) and acks it; a slot released later is
// handed to it there, in arrival order. Then it takes a slot freed
// meanwhile for the room's oldest task (a releaser that found the room
// empty just before the park freed it). If the park fails the task is
// handed back instead. A crash between the park and the ack runs the task
// twice (at least once).
func (f *flowControl) waitForSlot(a attemptInfo, meta spool.Meta, denied *flow.DeniedError) {
	m := &nats.Msg{Subject: a.msg.Subject(), Header: handBackHeader(a, meta), Data: a.msg.Data()}
	id := a.id + "-room-" + strconv.FormatUint(a.seq, 10)
	err := f.io.write(a, "parking for a concurrency slot", func(ctx context.Context) error {
		return f.limiter.Park(ctx, denied, meta.Key, id, m)
	})
	if err != nil {
		f.io.log.Warn("parking a task of a full concurrency limit failed; handing it back", "task_id", a.id, "type", a.typ, "error", err)
		f.limiter.Drop(f.io.ctx, denied.Kept...)
		f.io.handBack(a, meta, deferDelay(meta.Deferrals))
		return
	}
	if err := a.msg.Ack(); err != nil {
		f.io.log.Warn("acking a task parked for a concurrency slot", "task_id", a.id, "error", err)
	}
	f.io.log.Debug("task parked: concurrency limit full", "task_id", a.id, "type", a.typ, "limit", denied.Limit)
	ctx, cancel := context.WithTimeout(f.io.ctx, f.io.ioTimeout)
	defer cancel()
	f.limiter.Wake(ctx, denied, meta.Key)
}

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
func (f *flowControl) onKick(m *nats.Msg) {
	token, typ, err := f.io.names.ParseKickSubject(m.Subject)
	var key string
	if err == nil {
		key, err = limits.DecodeKey(token)
	}
	if err != nil {
		f.io.log.Warn("ignoring a kick request", "subject", m.Subject, "error", err)
		return
	}
	f.kickSem <- struct{}{}
	f.kicking.Add(1)
	go func() {
		defer func() { <-f.kickSem; f.kicking.Done() }()
		rule, _ := f.limiter.Rule(typ)
		ctx, cancel := context.WithTimeout(f.io.ctx, f.io.ioTimeout)
		defer cancel()
		// A rule lifted meanwhile still drains the key, one at a time.
		if err := f.turns.Kick(ctx, typ, key, max(1, rule.KeyWindow(key))); err != nil {
			f.io.log.Warn("starting an ordered key", "type", typ, "key", key, "error", err)
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
func (f *flowControl) sweepHeld(stop <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	t := time.NewTimer(jitter(heldSweepEvery/5, 1))
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		f.kickHeldKeys()
		t.Reset(jitter(heldSweepEvery, deferJitter))
	}
}

// kickHeldKeys kicks up to heldSweepMax keys that have held tasks, and
// pumps the waiting rooms among them (flow.Limiter.Pump).
func (f *flowControl) kickHeldKeys() {
	ctx, cancel := context.WithTimeout(f.io.ctx, heldSweepEvery)
	defer cancel()
	info, err := f.tasks.Info(ctx, jetstream.WithSubjectFilter(f.io.names.HeldFilter()))
	if err != nil {
		f.io.log.Debug("looking for held keys", "error", err)
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
		token, typ, err := f.io.names.ParseHeldSubject(subj)
		if err != nil {
			continue
		}
		if key, ok := limits.ParseRoomToken(token); ok {
			// A concurrency limit's waiting room: hand it the slots free
			// now (a slot that expired with its killed worker, a limit
			// raised or lifted).
			f.limiter.Pump(ctx, typ, key)
			continue
		}
		key, err := limits.DecodeKey(token)
		if err != nil {
			continue
		}
		rule, _ := f.limiter.Rule(typ)
		if err := f.turns.Kick(ctx, typ, key, max(1, rule.KeyWindow(key))); err != nil {
			f.io.log.Debug("starting a held key", "type", typ, "key", key, "error", err)
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
func (f *flowControl) admitOrder(a *attemptInfo, meta spool.Meta) bool {
	if f.turns == nil || meta.Key == "" {
		return true
	}
	rule, _ := f.limiter.Rule(a.typ)
	seq, released := limits.OrderSeq(a.msg.Headers())
	window := rule.KeyWindow(meta.Key)
	if !released && window == 0 {
		return true
	}
	ctx, cancel := context.WithTimeout(f.io.ctx, f.io.admitTimeout(a.p))
	defer cancel()
	if !released {
		return f.holdForTurn(ctx, *a, meta, window)
	}
	d, err := f.turns.Admit(ctx, a.typ, meta.Key, window, seq)
	if err != nil {
		f.io.log.Warn("reading the turn of an ordered key; handing the task back", "task_id", a.id, "type", a.typ, "error", err)
		f.io.handBack(*a, meta, deferDelay(meta.Deferrals))
		return false
	}
	if d == limits.WaitTurn {
		f.io.handBack(*a, meta, jitter(orderWait, deferJitter))
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
func (f *flowControl) holdForTurn(ctx context.Context, a attemptInfo, meta spool.Meta, window int) bool {
	h := handBackHeader(a, meta)
	_, err := f.turns.Park(ctx, a.typ, meta.Key, window, a.msg.Subject(), a.id+"-held-"+strconv.FormatUint(a.seq, 10),
		&nats.Msg{Header: h, Data: a.msg.Data()})
	if err != nil {
		// The held copy may be stored already: the redelivery parks it
		// again as a duplicate (same Nats-Msg-Id) and starts the key.
		f.io.log.Warn("parking an ordered task failed; it returns after a NAK delay", "task_id", a.id, "type", a.typ, "error", err)
		f.io.nak(a, deferDelay(meta.Deferrals))
		return false
	}
	if err := a.msg.Ack(); err != nil {
		f.io.log.Warn("acking a task parked for its key's turn", "task_id", a.id, "error", err)
	}
	f.io.log.Debug("task parked for its key's turn", "task_id", a.id, "type", a.typ)
	return false
}

// passTurn passes the key's turn on before the task's message is
// settled for good (or, with OrderSkip, retried).
func (f *flowControl) passTurn(a attemptInfo) error {
	if a.order == nil {
		return nil
	}
	return f.io.write(a, "passing the turn of task "+a.id, func(ctx context.Context) error {
		return f.turns.Finish(ctx, a.typ, a.order.key, a.order.window, a.order.seq)
	})
}
