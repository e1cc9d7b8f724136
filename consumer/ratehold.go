package consumer

import (
	"context"
	"sync"
	"time"

	"github.com/spoolq/spool/consumer/flow"
	spool "github.com/spoolq/spool/shared"
	"github.com/spoolq/spool/shared/limits"
)

// Tasks of a rate-limited type wait in the worker for their start instead
// of being handed back (flow.Limiter's rate lines). The wait is bounded:
// a line holds at most holdShare of the worker's slots, and where the
// worker pulls a type through a consumer of its own it stops pulling the
// type while the type's line is full, so the server keeps the rest of the
// backlog and no task is pulled only to be handed back.

// holdShare is the share of the worker's slots, in percent, that the
// tasks waiting in one rate line may hold: the rest stay for other types.
const holdShare = 75

// holdRates sets the bound of the rate lines and, where the worker pulls
// by type, the types whose lanes stop pulling while their line is full:
// those of an exact type, not a pattern. It runs once, before the first
// pull.
func (d *dispatcher) holdRates(f *flowControl) {
	if f == nil || f.limiter == nil {
		return
	}
	var exact []string
	for _, p := range d.patterns {
		if spool.ValidateType(p) == nil {
			exact = append(exact, p)
		}
	}
	f.limiter.Hold(max(1, d.o.MaxConcurrency*holdShare/100), exact)
	if len(exact) == 0 {
		return
	}
	d.mu.Lock()
	d.rateRoom = f.limiter.RateRoom
	d.mu.Unlock()
}

// laneRoomLocked is how many tasks lane i may pull now, -1 when its rate
// line does not bound it (no type-wide rate, or a lane of a pattern or a
// priority). d.mu is held.
func (d *dispatcher) laneRoomLocked(i int) int {
	if d.rateRoom == nil || len(d.patterns) == 0 {
		return -1
	}
	typ := d.patterns[(i/numPriorities)%len(d.patterns)]
	if spool.ValidateType(typ) != nil {
		return -1
	}
	room, limited := d.rateRoom(typ)
	if !limited {
		return -1
	}
	return room
}

// leaseContext is the context that bounds taking a task's leases: a
// check's bound (admitTimeout, passed as bound), or, for a rule with a
// rate and a first delivery, that plus flow.MaxHold, the longest a task
// waits in the worker for its start, with the task heartbeated meanwhile
// so that it is not delivered again.
// done ends it and records the last heartbeat in a.
func (f *flowControl) leaseContext(a *attemptInfo, rule limits.Rule, bound time.Duration) (ctx context.Context, done func()) {
	if rule.Rate == nil && rule.KeyRate == nil || a.attempt+a.snoozes > 1 {
		// A delivery again (its worker may have been killed while the
		// task waited in it) waits no longer than a check: past that it
		// is handed back with its return booked, a copy with a fresh
		// count of deliveries, so that waiting in workers that die never
		// uses up the task's deliveries.
		return context.WithTimeout(f.io.ctx, bound)
	}
	ctx, cancel := context.WithTimeout(f.io.ctx, flow.MaxHold+bound)
	stop := f.beatHeld(*a)
	return ctx, func() {
		a.beat = stop()
		cancel()
	}
}

// beatHeld heartbeats a task waiting for its rate start every third of
// its AckWait from its last heartbeat, on a timer rather than a goroutine
// of its own: most tasks start long before the first heartbeat is due.
// stop ends it and returns when the task's AckWait clock last restarted.
func (f *flowControl) beatHeld(a attemptInfo) (stop func() time.Time) {
	every := f.io.ackWait[a.p] / 3
	if every <= 0 {
		every = time.Second // AckWait unknown
	}
	var (
		mu      sync.Mutex
		last    = a.beat
		stopped bool
		t       *time.Timer
	)
	mu.Lock()
	defer mu.Unlock()
	t = time.AfterFunc(time.Until(last.Add(every)), func() {
		mu.Lock()
		defer mu.Unlock()
		if stopped {
			return
		}
		if err := a.msg.InProgress(); err != nil {
			f.io.log.Warn("heartbeat of a task waiting for its rate limit's start failed", "task_id", a.id, "error", err)
		}
		last = time.Now()
		t.Reset(every)
	})
	return func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		stopped = true
		t.Stop()
		return last
	}
}
