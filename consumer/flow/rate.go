package flow

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
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
// come first served, of at most lineCap: only its head reads the key
// (when the next start is due), so a waiting task costs no reads of its
// own; a task that finds the line full, or whose wait would pass
// localWait, is handed back.
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
	turn, ahead := l.joinLine(rk, lineCap(iv))
	if turn == nil {
		// The line is full: come back after it.
		return l.bookReturn(ctx, typ, key, limit, iv, time.Duration(ahead+1)*iv)
	}
	defer l.leaveLine(rk, turn)
	if ahead > 0 {
		l.waiting(typ, 1)
		t := time.NewTimer(localWait)
		select {
		case <-turn:
		case <-t.C:
		case <-ctx.Done():
		}
		t.Stop()
		l.waiting(typ, -1)
		if err := ctx.Err(); err != nil {
			return err
		}
		select {
		case <-turn:
		default:
			// Still not at the head: the line moves slower than the
			// wait allows.
			return l.bookReturn(ctx, typ, key, limit, iv, time.Duration(ahead)*iv)
		}
	}
	for {
		wait, taken, err := l.gcra(ctx, rk, iv, iv+tol, 0, false)
		if err != nil {
			return fmt.Errorf("%s limit of %q: %w", limit, typ, err)
		}
		if taken {
			return nil
		}
		if time.Until(deadline) < wait {
			return l.bookReturn(ctx, typ, key, limit, iv, wait)
		}
		// The next start is due soon: wait for it here rather than hand
		// the task back (schedules fire in clumps, so tasks booked an
		// interval apart often come back together). The start is taken
		// when it is due, not reserved ahead: a task that wakes late
		// then starts late (up to the slack without pushing the later
		// starts back).
		wait = max(wait, time.Millisecond)
		l.waiting(typ, 1)
		err = sleep(ctx, wait)
		l.waiting(typ, -1)
		if err != nil {
			return err
		}
	}
}

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

// joinLine puts a task at the end of the line of rate key rk: turn is
// closed when the task reaches the head (at once when ahead is 0); nil
// when the line is full.
func (l *Limiter) joinLine(rk string, most int) (turn chan struct{}, ahead int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	line := l.lines[rk]
	if len(line) >= most {
		return nil, len(line)
	}
	turn = make(chan struct{})
	if len(line) == 0 {
		close(turn)
	}
	l.lines[rk] = append(line, turn)
	return turn, len(line)
}

// leaveLine takes turn out of the line of rk, and hands the head on when
// it was the head.
func (l *Limiter) leaveLine(rk string, turn chan struct{}) {
	l.mu.Lock()
	defer l.mu.Unlock()
	line := l.lines[rk]
	for i, c := range line {
		if c != turn {
			continue
		}
		line = append(line[:i:i], line[i+1:]...)
		if i == 0 && len(line) > 0 {
			close(line[0])
		}
		break
	}
	if len(line) == 0 {
		delete(l.lines, rk)
		return
	}
	l.lines[rk] = line
}

// bookReturn books the return of a task turned away by a rate limit whose
// next start is due in about wait, and says when it is.
func (l *Limiter) bookReturn(ctx context.Context, typ, key, limit string, iv, wait time.Duration) error {
	qiv := iv * limits.ReturnSpacing / 100
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
	h := fnv.New32a()
	h.Write([]byte(k))
	lock := l.rateLocks[h.Sum32()%uint32(len(l.rateLocks))]
	select {
	case lock <- struct{}{}:
	case <-ctx.Done():
		return 0, false, ctx.Err()
	}
	defer func() { <-lock }()
	for range casTries {
		rctx, cancel := context.WithTimeout(ctx, l.io)
		var rev uint64
		now := time.Now()
		tat := now.Add(after)
		e, err := l.leases.Get(rctx, k)
		switch {
		case err == nil:
			rev = e.Revision()
			if ns, perr := strconv.ParseInt(string(e.Value()), 10, 64); perr == nil && ns > tat.UnixNano() {
				tat = time.Unix(0, ns)
			}
		case errors.Is(err, jetstream.ErrKeyNotFound):
		default:
			cancel()
			return 0, false, fmt.Errorf("reading %q: %w", k, err)
		}
		next, wait := gcraStep(tat, now, iv, burst)
		if !book && wait > 0 {
			cancel()
			return wait, false, nil
		}
		// The state matters until next; past it the key may go.
		ttl := max(time.Second, next.Sub(now)+time.Second)
		val := []byte(strconv.FormatInt(next.UnixNano(), 10))
		if rev == 0 {
			_, err = l.leases.Create(rctx, k, val, jetstream.KeyTTL(ttl))
		} else {
			_, err = l.put(rctx, k, val, rev, ttl)
		}
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
