package flow

import (
	"context"
	"time"

	"github.com/spoolq/spool/shared/limits"
)

// Slots a worker keeps between its tasks. A type-wide concurrency slot
// that a task of this worker released goes to the next task of the type
// in this worker: to the first task waiting in the worker's line for the
// type, or, with none waiting, it stays with the worker, idle, for
// idleHold, for the next task the server delivers. The slot key is not
// written while it passes from task to task: it stays held by this
// worker at the revision written last, and the limit counts it taken all
// along, so a limit that is full costs the worker's tasks no lease write
// and the other workers no slot change to hear. A slot no task took
// within idleHold is freed, or handed to the oldest task of the limit's
// waiting room, and so is every idle slot at each renewal and at Close:
// an idle slot is never renewed, and never outlives its worker's Close.
// A slot whose waiting room holds tasks goes to the room, not to the
// worker's next task: those tasks waited longer.

// idleHold is how long a released slot stays with its worker for the
// worker's next task of the type. The server delivers the next task of a
// type whose consumer carries its limit about one round trip after a
// running task's ack; a few of those fit in it.
const idleHold = 100 * time.Millisecond

// idleSlot is a type-wide slot this worker holds with no task in it.
type idleSlot = slot

// releaseSlot passes on slot s of a lease whose task ended: a type-wide
// slot to this worker's next task of the type (keepIdle), else as handOn
// does.
func (l *Limiter) releaseSlot(ctx context.Context, s slot) {
	if room, typ, key, ok := limits.RoomOf(l.names, s.key); ok && key == "" && l.keepIdle(typ, room, s) {
		return
	}
	l.handOn(ctx, s.key, s.rev)
}

// keepIdle keeps type-wide slot k of typ, held by a task of this worker
// that ended, for the worker's next task of the type, and wakes the first
// task in the worker's line for it. It returns false when the slot is to
// go on to the limit's waiting room or be freed instead: the room holds
// tasks, the limiter is closing, the slot is beyond the limit in force
// now, or it was written too long ago: its next task's lease renews it
// within a third of the TTL, and it must not expire before.
func (l *Limiter) keepIdle(typ, room string, held slot) bool {
	if l.CanPark() && l.roomBusy(room) || time.Since(held.at) > l.ttl/2 {
		return false
	}
	_, _, i, _ := limits.ParseSlotKey(held.key)
	if rule, ok := l.Rule(typ); !ok || i >= rule.Concurrency {
		return false
	}
	s := &held
	l.mu.Lock()
	select {
	case <-l.closing:
		l.mu.Unlock()
		return false
	default:
	}
	// Counted as a release in flight until it leaves the idle slots, so
	// Close frees it.
	l.releasing.Add(1)
	l.idle[typ] = append(l.idle[typ], s)
	l.handToLineLocked(typ, Grant{Slot: s.key})
	l.mu.Unlock()
	time.AfterFunc(idleHold, func() {
		if l.unidle(typ, s) {
			l.freeIdle(typ, s)
		}
	})
	return true
}

// takeIdle gives lease an idle slot of typ's limit of n slots, the one
// released last, and reports whether there was one. Idle slots beyond n
// (the limit was lowered) are freed.
func (l *Limiter) takeIdle(typ string, n int, lease *Lease) bool {
	l.mu.Lock()
	var beyond []*idleSlot
	var got *idleSlot
	for line := l.idle[typ]; len(line) > 0 && got == nil; {
		s := line[len(line)-1]
		line[len(line)-1] = nil
		line = line[:len(line)-1]
		l.idle[typ] = line
		if _, _, i, _ := limits.ParseSlotKey(s.key); i < n {
			got = s
		} else {
			beyond = append(beyond, s)
		}
	}
	if len(l.idle[typ]) == 0 {
		delete(l.idle, typ)
	}
	l.mu.Unlock()
	for _, s := range beyond {
		go l.freeIdle(typ, s)
	}
	if got == nil {
		return false
	}
	lease.addSlot(*got)
	l.releasing.Done()
	return true
}

// unidle takes s out of typ's idle slots; false when a task took it or
// it was freed already.
func (l *Limiter) unidle(typ string, s *idleSlot) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	line := l.idle[typ]
	for i, x := range line {
		if x == s {
			line = append(line[:i:i], line[i+1:]...)
			if len(line) == 0 {
				delete(l.idle, typ)
			} else {
				l.idle[typ] = line
			}
			return true
		}
	}
	return false
}

// freeIdle hands idle slot s, taken out of the idle slots, to the oldest
// task of its waiting room, or frees it.
func (l *Limiter) freeIdle(typ string, s *idleSlot) {
	defer l.releasing.Done()
	ctx, cancel := context.WithTimeout(l.life, 2*l.io)
	defer cancel()
	l.handOn(ctx, s.key, s.rev)
}

// freeAllIdle takes every idle slot out and frees it (at each renewal,
// and at Close); it waits for the frees.
func (l *Limiter) freeAllIdle() {
	l.mu.Lock()
	all := l.idle
	l.idle = map[string][]*idleSlot{}
	l.mu.Unlock()
	for typ, line := range all {
		for _, s := range line {
			l.freeIdle(typ, s)
		}
	}
}
