package flow

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	spool "github.com/spoolq/spool/shared"
	"github.com/spoolq/spool/shared/limits"
)

// ErrNotProvisioned: the rules or leases bucket does not exist (a
// deployment provisioned before flow control); the worker runs without
// limits.
var ErrNotProvisioned = errors.New("flow-control buckets not provisioned")

// DeniedError says a limit is full: the task should wait RetryAfter (0:
// unknown, a slot frees when another task ends) and try again.
type DeniedError struct {
	// Limit names the limit: "concurrency", "key_concurrency", "rate" or
	// "key_rate".
	Limit      string
	Type       string
	RetryAfter time.Duration
	// Kept is the slots the task keeps while it waits for a full
	// concurrency limit of its type (its key's slot, taken first): Park
	// carries them to the waiting room.
	Kept []Grant
}

func (e *DeniedError) Error() string {
	return fmt.Sprintf("%s limit of %q is full (retry after %s)", e.Limit, e.Type, e.RetryAfter)
}

// staleHint is how long the view holds a slot taken after a create found
// it held, when no change of the slot was seen.
const staleHint = time.Second

// casTries bounds the compare-and-set loop of a rate limit under
// contention.
const casTries = 8

// Limiter enforces the rules for one worker. Create it with New, end it
// with Close.
type Limiter struct {
	js     jetstream.JetStream
	nc     *nats.Conn
	leases jetstream.KeyValue
	subj   string // $KV.<leases>.
	owner  string
	ttl    time.Duration
	io     time.Duration
	log    *slog.Logger
	// tasks is the task stream, holding the waiting rooms; nil when it
	// has no held subjects (see CanPark).
	tasks jetstream.Stream
	names spool.Names
	// releasing counts the slot deletes in flight (Release does not wait
	// for them); Close waits.
	releasing sync.WaitGroup

	// life lives until Close ends the renewals (cancel): the frees of
	// idle slots, which their timers start, run under it.
	life   context.Context
	cancel context.CancelFunc
	// closing is closed as Close starts: the delayed looks at waiting
	// rooms (wakeLater) end.
	closing   chan struct{}
	closeOnce sync.Once
	rules     *limits.View
	subs      []*nats.Subscription
	done      sync.WaitGroup

	mu    sync.Mutex
	taken map[string]time.Time // slot key → until when the view holds it taken
	mine  map[*Lease]struct{}
	stats map[string]*TypeStats
	// rateLocks let one task of this worker at a time run the
	// compare-and-set of a rate key (striped by the key's hash): the others
	// wait their turn here instead of colliding on the server.
	rateLocks [64]chan struct{}
	// lines are the tasks waiting in this worker for a start of a rate
	// key, first come first served (see takeRate).
	lines map[string][]*waiter
	// reserved counts, per rate key, the tasks of this worker that left
	// its line with a start reserved and sleep until it.
	reserved map[string]int
	// rateLast is this worker's last write to each rate key (see
	// reserve).
	rateLast map[string]instant
	// rateIdle is when this worker last saw each rate key's limit idle
	// while a task was waiting (see reserve).
	rateIdle map[string]time.Time
	// ratePace is, per rate key, how long a start took this worker lately
	// (see paceLocked).
	ratePace map[string]time.Duration
	// rateRTT is the recent round trip of this worker's rate writes (see
	// ahead).
	rateRTT time.Duration
	// lineMost bounds each rate line, and holdTypes are the types whose
	// pulls this worker stops while their rate line is full (see Hold).
	lineMost  int
	holdTypes map[string]bool
	// roomLocks let one releaser of a waiting room at a time in this
	// process hand slots on (striped by the room's hash; see lockRoom).
	roomLocks [roomLockStripes]sync.Mutex
	// busy is when each waiting room was last seen holding tasks (see
	// roomBusy).
	busy map[string]time.Time
	// onRule is Config.OnRule.
	onRule func()
	// markers are the revisions of the delete markers this worker wrote
	// for slot keys (see createSlotKey).
	markers map[string]uint64
	// slotStream is the leases bucket's stream, bound at the first read
	// of a slot key's last entry (see lastSlotEntry).
	slotStream jetstream.Stream
	// slotLines are, per type, the tasks of this worker waiting for a
	// type-wide slot, first come first served (see AcquireWaiting).
	slotLines map[string][]*slotWaiter
	// idle are, per type, the type-wide slots this worker holds with no
	// task in them (see keepIdle).
	idle map[string][]*idleSlot
}

// TypeStats count one type's flow-control decisions in this worker.
type TypeStats struct {
	// Acquired counts leases taken (tasks let through a rule).
	Acquired uint64
	// Denied counts tasks turned away because a limit was full, by limit
	// (a rate's are handed back, a concurrency limit's parked in its
	// waiting room, or handed back where the stream has no rooms).
	Denied map[string]uint64
	// Parked counts tasks this worker parked in a concurrency limit's
	// waiting room, by limit ("concurrency", "key_concurrency").
	Parked map[string]uint64
	// Released counts waiting tasks this worker released from the type's
	// waiting rooms (handing each a slot).
	Released uint64
	// Held is the leases this worker holds now.
	Held int
	// Waiting is the tasks of the type waiting in this worker now for a
	// rate limit's start (at most MaxHold each before they run or are
	// handed back). Tasks of a full concurrency limit wait in its waiting
	// room on the task stream, not in a worker.
	Waiting int
	// LateStarts counts rate-limited starts this worker reserved and
	// then woke too late to take (another was taken instead).
	LateStarts uint64
}

// Config is what New needs.
type Config struct {
	JS    jetstream.JetStream
	Conn  *nats.Conn
	Names spool.Names
	// Owner names the worker in lease values.
	Owner string
	// TTL is how long a lease outlives its holder: the consumers' AckWait,
	// so a killed worker's slots come back when its tasks do. The holder
	// renews every TTL/3. At least 1s.
	TTL time.Duration
	// IOTimeout bounds each KV request.
	IOTimeout time.Duration
	Logger    *slog.Logger
	// OnRule, if not nil, is called after each change of the rules in
	// force, loaded ones included, from the watch's goroutine: it must
	// not block.
	OnRule func()
}

// New binds the buckets, loads the rules (every rule stored is in force
// when New returns) and starts watching them. ctx bounds start-up.
func New(ctx context.Context, c Config) (*Limiter, error) {
	if c.TTL < time.Second {
		c.TTL = time.Second
	}
	leases, err := c.JS.KeyValue(ctx, c.Names.LeasesBucket())
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, fmt.Errorf("%w: bucket %q", ErrNotProvisioned, c.Names.LeasesBucket())
	}
	if err != nil {
		return nil, fmt.Errorf("binding bucket %q: %w", c.Names.LeasesBucket(), err)
	}
	tasks, err := c.JS.Stream(ctx, c.Names.TaskStream())
	if err != nil {
		return nil, fmt.Errorf("binding stream %q: %w", c.Names.TaskStream(), err)
	}
	if !slices.Contains(tasks.CachedInfo().Config.Subjects, c.Names.HeldFilter()) {
		c.Logger.Warn("the task stream has no held subjects: tasks of a full concurrency limit are handed back, not parked; provision the topology again")
		tasks = nil
	}
	l := &Limiter{
		js: c.JS, nc: c.Conn, leases: leases, subj: "$KV." + c.Names.LeasesBucket() + ".",
		owner: c.Owner, ttl: c.TTL, io: c.IOTimeout, log: c.Logger,
		tasks: tasks, names: c.Names, onRule: c.OnRule, closing: make(chan struct{}),
		taken: map[string]time.Time{},
		mine:  map[*Lease]struct{}{}, stats: map[string]*TypeStats{},
		lines: map[string][]*waiter{}, busy: map[string]time.Time{}, slotLines: map[string][]*slotWaiter{}, idle: map[string][]*idleSlot{}, markers: map[string]uint64{},
		rateLast: map[string]instant{}, rateIdle: map[string]time.Time{},
		reserved: map[string]int{}, ratePace: map[string]time.Duration{},
	}
	for i := range l.rateLocks {
		l.rateLocks[i] = make(chan struct{}, 1)
	}
	// The view follows the type-wide slots only. A key's slots change
	// with every keyed task, and a key is seldom held by two workers at
	// once: every worker hearing every change would cost the fleet more
	// than the compare-and-set a create loses to a slot held elsewhere.
	sub, err := c.Conn.Subscribe(l.subj+"c.>", l.onSlot)
	if err != nil {
		return nil, fmt.Errorf("subscribing to slot changes: %w", err)
	}
	l.subs = append(l.subs, sub)
	view, err := limits.Watch(ctx, c.JS, c.Names, l.ruleChanged)
	if errors.Is(err, limits.ErrNoBucket) {
		err = fmt.Errorf("%w: %w", ErrNotProvisioned, err)
	}
	if err != nil {
		l.unsubscribe()
		return nil, err
	}
	l.rules = view
	// The renewals live until Close, past ctx.
	rctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	l.life, l.cancel = rctx, cancel
	l.done.Add(1)
	go l.renewLoop(rctx)
	return l, nil
}

// Close frees the slots the worker keeps idle (keepIdle), waits for the
// releases in flight, and stops watching and renewing. Leases still held expire after the TTL. A nil *Limiter does
// nothing.
func (l *Limiter) Close() {
	if l == nil {
		return
	}
	l.closeOnce.Do(func() { close(l.closing) })
	l.freeAllIdle()
	l.releasing.Wait()
	l.cancel()
	l.rules.Stop()
	l.unsubscribe()
	l.done.Wait()
}

func (l *Limiter) unsubscribe() {
	for _, s := range l.subs {
		_ = s.Unsubscribe()
	}
}

// ruleChanged logs a change of the rules in force, and tells OnRule.
func (l *Limiter) ruleChanged(name string, r *limits.Rule, err error) {
	if l.onRule != nil {
		defer l.onRule()
	}
	switch {
	case err != nil:
		// A raw writer's bad rule keeps the last good one in force.
		l.log.Error("ignoring invalid flow-control rule", "type", name, "error", err)
	case r == nil:
		l.log.Info("flow-control rule removed", "type", name)
	default:
		l.log.Info("flow-control rule in force", "type", r.Type, "concurrency", r.Concurrency, "key_concurrency", r.KeyConcurrency,
			"rate", r.Rate != nil, "key_rate", r.KeyRate != nil, "key_patterns", len(r.Keys))
	}
}

// Rule returns the rule in force for typ, if any: the one stored under
// typ, else the most precise pattern matching it (limits.Set), with Type
// typ (limits.Rule.For).
func (l *Limiter) Rule(typ string) (limits.Rule, bool) {
	return l.rules.Rule(typ)
}

// Stats returns this worker's counts per limited type.
func (l *Limiter) Stats() map[string]TypeStats {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make(map[string]TypeStats, len(l.stats))
	for t, s := range l.stats {
		c := *s
		c.Denied = maps.Clone(s.Denied)
		c.Parked = maps.Clone(s.Parked)
		out[t] = c
	}
	return out
}

func (l *Limiter) statsLocked(typ string) *TypeStats {
	s := l.stats[typ]
	if s == nil {
		s = &TypeStats{Denied: map[string]uint64{}, Parked: map[string]uint64{}}
		l.stats[typ] = s
	}
	return s
}

// Acquire takes the leases the rule of typ asks for a task with
// flow-control key key (may be empty) before it runs. It returns a nil
// Lease when no rule governs typ, a *DeniedError when a limit is full (no
// lease is then held), or another error when the leases could not be read
// or written (no lease is held either; the caller must not run the task
// blind).
func (l *Limiter) Acquire(ctx context.Context, typ, key, taskID string) (*Lease, error) {
	return l.AcquireGranted(ctx, typ, key, taskID, nil)
}

// AcquireGranted is Acquire for a task handed slots (GrantsOf: it left a
// waiting room): the task takes those slots over instead of new ones. The
// grants are used up whatever the outcome: a slot the rule no longer asks
// for, or that the task cannot keep (a rate is full), goes on to the next
// waiting task. When the type's concurrency limit is full, the key's slot
// taken before is kept for the task's wait (DeniedError.Kept).
func (l *Limiter) AcquireGranted(ctx context.Context, typ, key, taskID string, gs []Grant) (*Lease, error) {
	return l.AcquireWaiting(ctx, typ, key, taskID, gs, 0)
}

// AcquireWaiting is AcquireGranted for a task the server delivered under
// a cap of its type's concurrency limit (the consumer's MaxAckPending):
// when the type's limit is full it waits up to wait for one of its slots
// to be freed, and tries again, before it returns the *DeniedError. The
// slot of the task's key taken before is kept while it waits.
func (l *Limiter) AcquireWaiting(ctx context.Context, typ, key, taskID string, gs []Grant, wait time.Duration) (*Lease, error) {
	rule, ok := l.Rule(typ)
	if !ok || !rule.Limits() {
		l.Drop(ctx, gs...)
		return nil, nil
	}
	value, err := json.Marshal(limits.Holder{Task: taskID, Worker: l.owner})
	if err != nil {
		return nil, fmt.Errorf("encoding lease holder: %w", err)
	}
	if rule.Concurrency == 0 {
		// Only a type-wide slot is waited for in the worker's line.
		wait = 0
	}
	deadline := time.Now().Add(wait)
	lease := &Lease{l: l, typ: typ, value: value}
	for {
		// In line before the try, so a slot freed while it runs is not
		// missed.
		var w *slotWaiter
		if wait > 0 {
			w = l.joinSlotLine(typ)
		}
		err = l.acquire(ctx, rule.ForKey(key), key, lease, gs)
		var d *DeniedError
		if w == nil {
			break
		}
		if err == nil || !errors.As(err, &d) || d.Limit != "concurrency" || !time.Now().Before(deadline) {
			l.leaveSlotLine(ctx, typ, w)
			break
		}
		g, ok := awaitSlot(ctx, w, deadline)
		if !ok {
			l.leaveSlotLine(ctx, typ, w)
			break
		}
		// The slot handed over joins the key's slot kept; a freed one is
		// created by the next try.
		gs = d.Kept
		if g.Rev > 0 {
			gs = append(gs, g)
		}
		lease = &Lease{l: l, typ: typ, value: value}
	}
	if err != nil {
		// ctx may be what ended: give the release a context of its own.
		lease.release(context.WithoutCancel(ctx))
		var d *DeniedError
		l.mu.Lock()
		if errors.As(err, &d) {
			l.statsLocked(typ).Denied[d.Limit]++
		}
		l.mu.Unlock()
		return nil, err
	}
	l.mu.Lock()
	l.mine[lease] = struct{}{}
	s := l.statsLocked(typ)
	s.Acquired++
	s.Held++
	l.mu.Unlock()
	return lease, nil
}

// waiting counts a task of typ waiting in this worker (d = 1 as it
// starts waiting, -1 as it stops).
func (l *Limiter) waiting(typ string, d int) {
	l.mu.Lock()
	l.statsLocked(typ).Waiting += d
	l.mu.Unlock()
}

func (l *Limiter) acquire(ctx context.Context, rule limits.Rule, key string, lease *Lease, gs []Grant) error {
	value := lease.value
	// The key's slot first: a task that then finds the type's limit full
	// keeps it while it waits in the type's room, so it waits in each
	// room at most once.
	if rule.KeyConcurrency > 0 && key != "" {
		if !l.adoptOne(ctx, gs, rule.Type, key, lease) {
			if err := l.takeSlot(ctx, rule.Type, key, rule.KeyConcurrency, value, lease); err != nil {
				l.Drop(ctx, gs...)
				return err
			}
		}
	}
	if rule.Concurrency > 0 {
		if !l.adoptOne(ctx, gs, rule.Type, "", lease) && !l.takeIdle(rule.Type, rule.Concurrency, lease) {
			if err := l.takeSlot(ctx, rule.Type, "", rule.Concurrency, value, lease); err != nil {
				l.Drop(ctx, gs...)
				var d *DeniedError
				if errors.As(err, &d) {
					d.Kept = lease.keep()
				}
				return err
			}
		}
	}
	l.Drop(ctx, gs...)
	// Rates last: a start is counted only when it happens (a token taken
	// before a full slot would be lost; one taken by the type-wide rate
	// before a full key rate is lost, which errs on the safe side).
	if rule.KeyRate != nil && key != "" {
		if err := l.takeRate(ctx, rule.Type, key, *rule.KeyRate, "key_rate"); err != nil {
			return err
		}
	}
	if rule.Rate != nil {
		if err := l.takeRate(ctx, rule.Type, "", *rule.Rate, "rate"); err != nil {
			return err
		}
	}
	return nil
}

// renewLoop renews every held slot every TTL/3, and forgets the slots
// the view holds past their TTL.
func (l *Limiter) renewLoop(ctx context.Context) {
	defer l.done.Done()
	t := time.NewTicker(l.ttl / 3)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		l.mu.Lock()
		now := time.Now()
		for k, until := range l.taken {
			if now.After(until) {
				delete(l.taken, k)
			}
		}
		l.forgetRatesLocked(now)
		for room, at := range l.busy {
			if now.Sub(at) > roomBusyFor {
				delete(l.busy, room)
			}
		}
		held := make([]*Lease, 0, len(l.mine))
		for le := range l.mine {
			held = append(held, le)
		}
		l.mu.Unlock()
		for _, le := range held {
			le.renew(ctx)
		}
		l.freeAllIdle()
	}
}
