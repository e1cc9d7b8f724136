package flow

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
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
// waiting task costs no reads of its own; a task that finds the line
// full, or whose wait would pass localWait, is handed back. The head
// writes its start ahead (reserve): once the start is due within
// reserveAhead it moves tat on at once and sleeps until the start is
// allowed, and the next in line reserves the start after it meanwhile.
// So the round trips of one start overlap the wait for the one before,
// and a worker slow to answer (a loaded machine) does not push every
// start back by its latency.
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
	deadline := time.Now().Add(localWait)
	w, ahead := l.joinLine(rk, lineCap(iv))
	if w == nil {
		// The line is full: come back after it.
		return l.bookReturn(ctx, typ, key, limit, iv, time.Duration(ahead+1)*iv)
	}
	defer l.leaveLine(rk, w)
	if ahead > 0 {
		l.waiting(typ, 1)
		t := time.NewTimer(localWait)
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
		if until := l.reservedFor(w); !until.IsZero() {
			// A start is reserved for it, allowed from until−tol to
			// until.
			l.waiting(typ, 1)
			err := sleep(ctx, time.Until(until.Add(-tol)))
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
			w.until = time.Time{}
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
		err = sleep(ctx, max(wait-reserveAhead, time.Millisecond))
		l.waiting(typ, -1)
		if err != nil {
			return err
		}
	}
}

// reserveAhead is how long before its start a task writes it to the rate
// key (see takeRate): longer than a round trip to the server on a loaded
// machine, short enough that a worker killed while it sleeps loses few
// starts (about reserveAhead / interval across the fleet).
const reserveAhead = 50 * time.Millisecond

// reserve writes the next starts of rate key rk to the key when the
// first is due within reserveAhead and within most: one for the line's
// head w and one for each task behind it in the line whose start is due
// within reserveAhead too, in one write. When the head's start is allowed
// at once (now), the write is the start, as in GCRA. Each other start k
// is reserved for its task (reserved; the task's until), allowed from
// tat_k − tol to tat_k: a start in that span is one GCRA would let
// through writing the same value. When the first start is further off,
// nothing is written and wait is how long until it is due.
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
		tat, _, wait := reserveStep(last.at, at, iv, tol)
		if wait > reserveAhead || wait > most {
			cancel()
			return false, false, wait, nil
		}
		n := 1 + min(max(behind, 0), int((reserveAhead-wait)/iv))
		next := tat.Add(time.Duration(n) * iv)
		rev, err := l.writeInstant(rctx, rk, next, last.rev, max(time.Second, next.Sub(at)+time.Second))
		cancel()
		switch {
		case err == nil:
			l.mu.Lock()
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
			l.handOutLocked(rk, w, tat, iv, n, wait <= 0)
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
func reserveStep(stored, now time.Time, iv, tol time.Duration) (tat, next time.Time, wait time.Duration) {
	tat = maxTime(stored, now)
	return tat, tat.Add(iv), tat.Sub(now) - tol
}

// instant is a rate or queue key's value (Unix nanoseconds) at a revision
// (0: the key is absent).
type instant struct {
	at  time.Time
	rev uint64
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

// A line holds the tasks for the starts of the next lineSpan (handed-back
// tasks come back that early, and the server fires schedules in clumps
// about that far apart), at least minLine and at most maxLine: the next
// ones are handed back at once. A worker killed while its tasks wait
// holds them until AckWait, so no more wait than the line can use.
const (
	lineSpan = 300 * time.Millisecond
	minLine  = 4
	maxLine  = 64
)

// lineCap is the most tasks in the line of a rate of interval iv.
func lineCap(iv time.Duration) int {
	return min(maxLine, max(minLine, int(lineSpan/max(iv, 1))+1))
}

// A waiter is a task in the line of a rate key: turn is closed when it
// reaches the head, or when the head reserved a start for it (until).
type waiter struct {
	turn  chan struct{}
	until time.Time // the last moment of the start reserved for it
	// out: it left the line with a reserved start, and counts in
	// Limiter.reserved until it returns; gone: it left without one.
	out, gone bool
}

// joinLine puts a task at the end of the line of rate key rk; its turn
// is closed at once when ahead is 0. It returns nil when the line is full
// (most tasks in it or sleeping on a reserved start).
func (l *Limiter) joinLine(rk string, most int) (w *waiter, ahead int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	line := l.lines[rk]
	if len(line)+l.reserved[rk] >= most {
		return nil, len(line)
	}
	w = &waiter{turn: make(chan struct{})}
	if len(line) == 0 {
		close(w.turn)
	}
	l.lines[rk] = append(line, w)
	return w, len(line)
}

// handOutLocked gives the n starts written from tat on to the head w
// (unless its start is now, and it is going) and the n−1 tasks behind
// it, which leave the line and count in l.reserved until they return;
// the next task becomes the head. Fewer tasks than n left in the line
// (one gave up meanwhile) leave the last starts unused.
func (l *Limiter) handOutLocked(rk string, w *waiter, tat time.Time, iv time.Duration, n int, now bool) {
	line := l.lines[rk]
	if len(line) == 0 || line[0] != w {
		// A task that left the line and woke too late for its start
		// reserves one for itself.
		if !now {
			w.until = tat
		}
		return
	}
	n = min(n, len(line))
	for k, o := range line[:n] {
		if k == 0 && now {
			continue
		}
		o.until, o.out = tat.Add(time.Duration(k)*iv), true
		l.reserved[rk]++
		if k > 0 {
			close(o.turn)
		}
	}
	if now {
		w.gone = true
	}
	l.setLineLocked(rk, line[n:])
}

// reservedFor returns the last moment of the start reserved for w (zero:
// none).
func (l *Limiter) reservedFor(w *waiter) time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return w.until
}

// giveUp takes w out of the line of rk when it is not at the head and no
// start was reserved for it (true), so that it can be handed back.
func (l *Limiter) giveUp(rk string, w *waiter) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	line := l.lines[rk]
	i := slices.Index(line, w)
	if i <= 0 {
		return false
	}
	w.gone = true
	l.setLineLocked(rk, slices.Delete(line, i, i+1))
	return true
}

// leaveLine ends w's time in the line of rk as its task returns: out of
// the line (handing the head on when it was the head), or out of the
// count of reserved starts.
func (l *Limiter) leaveLine(rk string, w *waiter) {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case w.gone:
	case w.out:
		if l.reserved[rk]--; l.reserved[rk] <= 0 {
			delete(l.reserved, rk)
		}
	default:
		line := l.lines[rk]
		if i := slices.Index(line, w); i >= 0 {
			l.setLineLocked(rk, slices.Delete(line, i, i+1))
		}
	}
	w.gone = true
}

// setLineLocked stores the line of rk (the head's turn closed).
func (l *Limiter) setLineLocked(rk string, line []*waiter) {
	if len(line) == 0 {
		delete(l.lines, rk)
		return
	}
	if h := line[0]; !h.out {
		select {
		case <-h.turn:
		default:
			close(h.turn)
		}
	}
	l.lines[rk] = line
}

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

// gcra runs one step of the generic cell-rate algorithm on key k. Without
// book, it takes a start when one is due (taken), and otherwise returns
// how long until one is, leaving k alone. With book, it always advances
// k, from no earlier than now+after, and returns how long until the
// booked time.
func (l *Limiter) gcra(ctx context.Context, k string, iv, burst, after time.Duration, book bool) (wait time.Duration, taken bool, err error) {
	unlock, err := l.lockRate(ctx, k)
	if err != nil {
		return 0, false, err
	}
	defer unlock()
	for range casTries {
		rctx, cancel := context.WithTimeout(ctx, l.io)
		last, err := l.readInstant(rctx, k)
		if err != nil {
			cancel()
			return 0, false, err
		}
		now := time.Now()
		tat := maxTime(last.at, now.Add(after))
		next, wait := gcraStep(tat, now, iv, burst)
		if !book && wait > 0 {
			cancel()
			return wait, false, nil
		}
		// The state matters until next; past it the key may go.
		_, err = l.writeInstant(rctx, k, next, last.rev, max(time.Second, next.Sub(now)+time.Second))
		cancel()
		switch {
		case err == nil:
			if book {
				return tat.Sub(now), true, nil
			}
			return 0, true, nil
		case errors.Is(err, jetstream.ErrKeyExists), isWrongLastSeq(err):
			continue // another worker moved it: read again
		default:
			return 0, false, fmt.Errorf("writing %q: %w", k, err)
		}
	}
	if book {
		return 0, false, fmt.Errorf("%q kept changing: gave up after %d tries", k, casTries)
	}
	return iv, false, nil
}

// lockRate lets one task of this worker at a time run the
// compare-and-set of key k (striped by the key's hash); unlock ends it.
func (l *Limiter) lockRate(ctx context.Context, k string) (unlock func(), err error) {
	h := fnv.New32a()
	h.Write([]byte(k))
	lock := l.rateLocks[h.Sum32()%uint32(len(l.rateLocks))]
	select {
	case lock <- struct{}{}:
		return func() { <-lock }, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// readInstant reads a rate or queue key (the zero instant when it is
// absent or not a number).
func (l *Limiter) readInstant(ctx context.Context, k string) (instant, error) {
	e, err := l.leases.Get(ctx, k)
	switch {
	case err == nil:
		in := instant{rev: e.Revision()}
		if ns, perr := strconv.ParseInt(string(e.Value()), 10, 64); perr == nil {
			in.at = time.Unix(0, ns)
		}
		return in, nil
	case errors.Is(err, jetstream.ErrKeyNotFound):
		return instant{}, nil
	default:
		return instant{}, fmt.Errorf("reading %q: %w", k, err)
	}
}

// writeInstant writes at to key k if its last revision is still rev (0:
// the key is absent), with a per-key TTL, and returns the new revision.
func (l *Limiter) writeInstant(ctx context.Context, k string, at time.Time, rev uint64, ttl time.Duration) (uint64, error) {
	val := []byte(strconv.FormatInt(at.UnixNano(), 10))
	if rev == 0 {
		return l.leases.Create(ctx, k, val, jetstream.KeyTTL(ttl))
	}
	return l.put(ctx, k, val, rev, ttl)
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// gcraStep is the arithmetic of one GCRA step: with tat no earlier than
// now, the start moves tat to next, and is due in wait (allowed now when
// wait ≤ 0).
func gcraStep(tat, now time.Time, iv, burst time.Duration) (next time.Time, wait time.Duration) {
	next = tat.Add(iv)
	return next, next.Sub(now) - burst
}

// put writes k if its last revision is still rev, with a per-key TTL (KV
// Update would drop the TTL).
func (l *Limiter) put(ctx context.Context, k string, val []byte, rev uint64, ttl time.Duration) (uint64, error) {
	ack, err := l.js.PublishMsg(ctx, &nats.Msg{Subject: l.subj + k, Data: val, Header: nats.Header{}},
		jetstream.WithExpectLastSequencePerSubject(rev), jetstream.WithMsgTTL(ttl))
	if err != nil {
		return 0, err
	}
	return ack.Sequence, nil
}

func isWrongLastSeq(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && (apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
		apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant)
}
