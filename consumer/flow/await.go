package flow

import (
	"context"
	"strings"
	"time"
)

// Waiting in the worker for a slot of a limit the server holds. Where
// workers pull by type, the consumer of a limited type carries the limit
// as MaxAckPending (streams.ConcurrencyCap): the server delivers the next
// task as soon as a running one is acked, which can be a moment before
// the slot it held is freed. Such a task waits in this worker's line for
// the type (AcquireWaiting), first come first served, instead of going to
// the waiting room: a slot this worker releases stays with the worker
// and wakes the first in line to take it (keepIdle), and a slot freed
// elsewhere wakes the first in line to create it.

// slotWaiter is a task in a type's line. ch receives the slot handed to
// it: rev > 0 is a slot to take over at that revision, rev 0 a slot freed
// (create it).
type slotWaiter struct {
	ch chan Grant
}

// joinSlotLine puts a new waiter at the end of typ's line.
func (l *Limiter) joinSlotLine(typ string) *slotWaiter {
	w := &slotWaiter{ch: make(chan Grant, 1)}
	l.mu.Lock()
	l.slotLines[typ] = append(l.slotLines[typ], w)
	l.mu.Unlock()
	return w
}

// leaveSlotLine takes w out of typ's line. A slot handed to it meanwhile goes
// on to the next in line, or is freed.
func (l *Limiter) leaveSlotLine(ctx context.Context, typ string, w *slotWaiter) {
	l.mu.Lock()
	line := l.slotLines[typ]
	for i, x := range line {
		if x == w {
			l.dropWaiterLocked(typ, i)
			l.mu.Unlock()
			return
		}
	}
	l.mu.Unlock()
	select {
	case g := <-w.ch:
		l.passOn(ctx, typ, g)
	default:
	}
}

// dropWaiterLocked removes the i-th waiter of typ's line. l.mu is held.
func (l *Limiter) dropWaiterLocked(typ string, i int) {
	line := l.slotLines[typ]
	line = append(line[:i:i], line[i+1:]...)
	if len(line) == 0 {
		delete(l.slotLines, typ)
		return
	}
	l.slotLines[typ] = line
}

// handToLineLocked hands slot g to the first in typ's line; false when
// the line is empty. l.mu is held.
func (l *Limiter) handToLineLocked(typ string, g Grant) bool {
	line := l.slotLines[typ]
	if len(line) == 0 {
		return false
	}
	w := line[0]
	l.dropWaiterLocked(typ, 0)
	w.ch <- g
	return true
}

// passOn gives a slot handed to a waiter that left the line to the next
// in line: one to take over is handed on (or freed), one freed wakes the
// next.
func (l *Limiter) passOn(ctx context.Context, typ string, g Grant) {
	if g.Rev > 0 {
		l.handOn(ctx, g.Slot, g.Rev)
		return
	}
	l.mu.Lock()
	l.handToLineLocked(typ, g)
	l.mu.Unlock()
}

// slotFreedLocked wakes the first task waiting in this worker for a slot
// of the limit whose slot key k was freed. l.mu is held.
func (l *Limiter) slotFreedLocked(k string) {
	rest, ok := strings.CutPrefix(k, "c.")
	if !ok {
		return
	}
	if i := strings.LastIndexByte(rest, '.'); i > 0 {
		l.handToLineLocked(rest[:i], Grant{Slot: k})
	}
}

// awaitSlot waits in line (w) until a slot is handed over, deadline
// passes or ctx ends. It returns the slot to take over (a grant with a
// revision) and whether one came; a freed slot comes as a grant without
// one.
func awaitSlot(ctx context.Context, w *slotWaiter, deadline time.Time) (Grant, bool) {
	t := time.NewTimer(time.Until(deadline))
	defer t.Stop()
	select {
	case g := <-w.ch:
		return g, true
	case <-t.C:
		return Grant{}, false
	case <-ctx.Done():
		return Grant{}, false
	}
}
