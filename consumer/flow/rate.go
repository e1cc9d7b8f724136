package flow

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/spoolq/spool/shared/limits"
)

// Rate limits: GCRA on a KV key, compare-and-set per start.

// takeRate takes one start from a rate limit (GCRA, limits.Rate.GCRA): the
// key holds the theoretical arrival time tat in Unix nanoseconds; a start
// is allowed when tat − now ≤ tolerance, and moves tat to max(tat, now) +
// interval.
//
// The tasks of one rate key waiting in this worker form a line, first
// come first served, of at most lineCap: only its head reads the key, so a
// waiting task costs no reads of its own. A task waits in the line for
// its start, however many are ahead of it, up to MaxHold where the worker
// stops pulling its type while the line is full (Hold) and 600ms
// elsewhere: a task that finds the line full (unless its type is one of
// those), or whose wait would pass that, is handed back. The head
// writes its start ahead (reserve): once the start is due within
// reserveAhead it moves tat on at once, for itself and the tasks behind
// it whose starts fall within half the tolerance (groupOf), and the
// group sleeps until its starts are allowed, while the next in line
// reserves the starts after them. So the round trips of one group
// overlap the wait for the one before, a worker slow to answer (a loaded
// machine) does not push every start back by its latency, and a group
// that wakes late by up to the other half of the tolerance still takes
// its starts.
//
// A denied start books its return in the limit's queue key (q.<type> or
// kq.<type>.<key>, the same arithmetic with a burst of 1): waiting tasks
// come back in the order they were turned away, so a backlog is handed
// back about once per task instead of polling the limit. They come back a
// little faster than the rate (limits.ReturnSpacing): a task booked for a
// turn may not be there to take it (its worker was killed while it
// waited, or a schedule fired late), and a turn nobody takes is lost; the
// few that come back too many wait in their worker for a start or are
// booked again.
func (l *Limiter) takeRate(ctx context.Context, typ, key string, r limits.Rate, limit string) error {
	iv, tol := r.GCRA()
	rk := limits.RateKey(typ, key)
	hold := l.holdFor(typ, key)
	if dl, ok := ctx.Deadline(); ok {
		// The caller's bound ends the wait before it does: the task is
		// then handed back with its return booked.
		hold = min(hold, time.Until(dl)*3/4)
	}
	deadline := time.Now().Add(hold)
	w, ahead := l.joinLine(rk, typ, key, iv)
	if w == nil {
		// The line is full: come back after it.
		return l.bookReturn(ctx, typ, key, limit, iv, time.Duration(ahead+1)*iv)
	}
	defer l.leaveLine(rk, w)
	if ahead > 0 {
		l.waiting(typ, 1)
		t := time.NewTimer(time.Until(deadline))
		select {
		case <-w.turn:
		case <-t.C:
		case <-ctx.Done():
		}
		t.Stop()
		l.waiting(typ, -1)
		if err := ctx.Err(); err != nil {
			return err
		}
		if l.giveUp(rk, w) {
			// Still not at the head: the line moves slower than the
			// wait allows.
			return l.bookReturn(ctx, typ, key, limit, iv, time.Duration(ahead)*iv)
		}
	}
	head := time.Now() // when this task was first ready to start
	for {
		if from, until := l.reservedFor(w); !until.IsZero() {
			// A start is reserved for it, allowed up to until; its
			// group starts together from from.
			l.waiting(typ, 1)
			err := sleep(ctx, time.Until(from))
			l.waiting(typ, -1)
			if err != nil {
				return err
			}
			if !time.Now().After(until) {
				return nil
			}
			// Woke too late for it (a loaded machine): that start is
			// lost, and this task takes the next one free.
			l.mu.Lock()
			l.statsLocked(typ).LateStarts++
			w.from, w.until = time.Time{}, time.Time{}
			l.paceLocked(rk, iv, 2*iv) // that start went unused
			l.mu.Unlock()
		}
		now, reserved, wait, err := l.reserve(ctx, rk, w, iv, tol, time.Until(deadline), head)
		if err != nil {
			return fmt.Errorf("%s limit of %q: %w", limit, typ, err)
		}
		if now {
			return nil
		}
		if reserved {
			continue
		}
		if time.Until(deadline) < wait {
			return l.bookReturn(ctx, typ, key, limit, iv, wait)
		}
		// The next start is due soon: wait for it here rather than hand
		// the task back (schedules fire in clumps, so tasks booked an
		// interval apart often come back together).
		l.waiting(typ, 1)
		err = sleep(ctx, max(wait-l.ahead(), time.Millisecond))
		l.waiting(typ, -1)
		if err != nil {
			return err
		}
	}
}

// reserveAhead is how long before its start a task writes it to the rate
// key (see takeRate): longer than a round trip to the server on a loaded
// machine, short enough that a worker killed while it sleeps loses few
// starts (about (reserveAhead + tolerance) / interval across the fleet).
const reserveAhead = 25 * time.Millisecond

// maxAhead bounds how far ahead a worker whose writes are slow writes
// its starts (see ahead).
const maxAhead = 250 * time.Millisecond

// ahead is how long before its start a task writes it: reserveAhead, or
// twice this worker's recent round trip of a rate write when that is
// longer (a loaded machine), so that the write is back before the start
// is due and one write takes the starts due meanwhile. Writing one start
// per round trip would cap the starts at one per round trip.
func (l *Limiter) ahead() time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	return min(max(reserveAhead, 2*l.rateRTT), maxAhead)
}

// groupSpan is the share, in percent, of a rate's tolerance that the
// starts of one write span (see reserve): they start together, and the
// rest of the tolerance is how late their worker may wake for them.
const groupSpan = 50

// groupOf is how many starts of a rate of interval iv and tolerance tol
// one write takes, at most: those within groupSpan of the tolerance of
// the first.
func groupOf(iv, tol time.Duration) int {
	return 1 + int(tol*groupSpan/100/max(iv, 1))
}

// reserve writes the next starts of rate key rk to the key when the
// first is due within reserveAhead and within most: one for the line's
// head w and one for each task behind it in the line, up to groupOf
// starts, in one write. When the head's start is allowed at once (now),
// the write is the start, as in GCRA. Each other start k is reserved for
// its task (reserved; the task's until), allowed from tat_k − tol to
// tat_k: a start in that span is one GCRA would let through writing the
// same value. The starts of one write go together (the tasks' from:
// tat of the last one − tol, which is no later than the first's tat):
// their runs, results and acks then share the round trips, a tenth of
// the cost of starts an interval apart. When the first start is further
// off, nothing is written and wait is how long until it is due.
//
// A start that was due a whole interval or more before head (when the
// task was first ready to take it) went by unused: no task of the fleet
// was there for it (its worker was killed, its schedule fired late). The
// worker notes when it saw that (rateIdle), and books returns closer
// together for a while (bookReturn).
//
// The worker remembers the value and revision of its last write to each
// rate key, and tries the next write on them before reading: a worker
// that takes most starts of a limit writes once per batch of starts.
func (l *Limiter) reserve(ctx context.Context, rk string, w *waiter, iv, tol, most time.Duration, head time.Time) (now, reserved bool, wait time.Duration, err error) {
	unlock, err := l.lockRate(ctx, rk)
	if err != nil {
		return false, false, 0, err
	}
	defer unlock()
	l.mu.Lock()
	last, cached := l.rateLast[rk]
	behind := 0
	if line := l.lines[rk]; len(line) > 0 && line[0] == w {
		behind = len(line) - 1
	}
	l.mu.Unlock()
	ahead := l.ahead()
	// The write takes the starts due within ahead, at least a group; the
	// first group of them has lead to spare for a late wake-up.
	g := groupOf(iv, tol)
	n := min(1+max(behind, 0), max(g, 1+int(ahead/iv)))
	lead := tol - time.Duration(min(n, g)-1)*iv
	for range casTries {
		rctx, cancel := context.WithTimeout(ctx, l.io)
		if !cached {
			last, err = l.readInstant(rctx, rk)
			if err != nil {
				cancel()
				return false, false, 0, err
			}
		}
		at := time.Now()
		tat, _, wait := reserveStep(last.at, at, iv, tol, lead)
		if wait > ahead || wait > most {
			cancel()
			return false, false, wait, nil
		}
		next := tat.Add(time.Duration(n) * iv)
		rev, err := l.writeInstant(rctx, rk, next, last.rev, max(time.Second, next.Sub(at)+time.Second))
		cancel()
		switch {
		case err == nil:
			l.mu.Lock()
			l.rateRTT += (time.Since(at) - l.rateRTT) / 4
			l.rateLast[rk] = instant{at: next, rev: rev}
			if last.rev != 0 && head.Sub(last.at) >= iv {
				l.rateIdle[rk] = at
			}
			if last.rev != 0 {
				// The first start was due at last.at, or when the head
				// came if later: past that, this worker was too slow.
				late := max(0, at.Sub(maxTime(last.at, head)))
				l.paceLocked(rk, iv, iv+late/time.Duration(n))
			}
			l.handOutLocked(rk, w, tat, iv, tol, n, g, wait <= 0)
			l.mu.Unlock()
			return wait <= 0, wait > 0, 0, nil
		case errors.Is(err, jetstream.ErrKeyExists), isWrongLastSeq(err):
			cached = false // another worker moved it: read again
		default:
			l.forgetRate(rk)
			return false, false, 0, fmt.Errorf("writing %q: %w", rk, err)
		}
	}
	l.forgetRate(rk)
	return false, false, iv, nil
}

// reserveStep is the arithmetic of reserve: with the key at stored, the
// next start at now is the one GCRA allows from tat − tol (due in wait;
// allowed at once when wait ≤ 0) to tat, and it moves the key to next.
// An idle key's start is written lead after now (at most tol, so it is
// allowed at once): a group of starts taken together then has lead to
// spare for a late wake-up, as it has under a backlog.
func reserveStep(stored, now time.Time, iv, tol, lead time.Duration) (tat, next time.Time, wait time.Duration) {
	tat = maxTime(stored, now.Add(min(lead, tol)))
	return tat, tat.Add(iv), tat.Sub(now) - tol
}

// forgetRate drops the remembered last write of rate key rk.
func (l *Limiter) forgetRate(rk string) {
	l.mu.Lock()
	delete(l.rateLast, rk)
	l.mu.Unlock()
}

// forgetRatesLocked drops the remembered writes of rate keys whose state
// has expired (a key lives one second past its value) and their pace, and
// the idle limits seen longer than idleMemory ago.
func (l *Limiter) forgetRatesLocked(now time.Time) {
	for rk, last := range l.rateLast {
		if now.Sub(last.at) > time.Second {
			delete(l.rateLast, rk)
		}
	}
	for rk, at := range l.rateIdle {
		if now.Sub(at) > idleMemory {
			delete(l.rateIdle, rk)
		}
	}
	for rk := range l.ratePace {
		if _, ok := l.rateLast[rk]; !ok {
			delete(l.ratePace, rk)
		}
	}
}

// idleMemory is how long a worker books returns closer together after it
// saw a rate limit idle while tasks were waiting.
const idleMemory = 10 * time.Second

// paceLocked adds one sample of the time a start of rate key rk took this
// worker (the interval iv, more when the worker reserved it late or woke
// too late for it) to a moving average.
func (l *Limiter) paceLocked(rk string, iv, took time.Duration) {
	p, ok := l.ratePace[rk]
	if !ok {
		p = iv
	}
	l.ratePace[rk] = p + (took-p)/8
}

// maxPace bounds the spacing of a rate's booked returns, in intervals.
const maxPace = 2

// bookReturn books the return of a task turned away by a rate limit whose
// next start is due in about wait, and says when it is. The returns are
// booked one interval apart, or as far apart as this worker takes the
// starts when it is too slow to take them all (ratePace: a loaded
// machine), so that each comes back about when its turn is due and is
// handed back once; for idleMemory after this worker saw
// the limit idle while tasks were waiting (see reserve), they are booked
// limits.ReturnSpacing of an interval apart, so that more come back than
// there are turns and a turn whose task is not there is taken by another.
func (l *Limiter) bookReturn(ctx context.Context, typ, key, limit string, iv, wait time.Duration) error {
	rk := limits.RateKey(typ, key)
	l.mu.Lock()
	qiv := max(iv, min(l.ratePace[rk], maxPace*iv))
	idle, seen := l.rateIdle[rk]
	l.mu.Unlock()
	if seen && time.Since(idle) < idleMemory {
		qiv = iv * limits.ReturnSpacing / 100
	}
	back, _, err := l.gcra(ctx, limits.QueueKey(typ, key), qiv, qiv, wait, true)
	if err != nil {
		back = wait
	}
	return &DeniedError{Limit: limit, Type: typ, RetryAfter: back}
}

// sleep waits d, or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
