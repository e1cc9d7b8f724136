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

// takeRate takes one start from a rate limit (GCRA): the key holds the
// theoretical arrival time tat in Unix nanoseconds; a start is allowed when
// max(tat, now) + interval - now <= burst·interval, and moves tat there.
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
	var wait time.Duration
	for waited := time.Duration(0); ; waited += wait {
		var err error
		var taken bool
		wait, taken, err = l.gcra(ctx, limits.RateKey(typ, key), iv, iv+tol, 0, false)
		if err != nil {
			return fmt.Errorf("%s limit of %q: %w", limit, typ, err)
		}
		if taken {
			return nil
		}
		if waited+wait > localWait {
			break
		}
		// The next start is due soon: wait for it here rather than hand
		// the task back (schedules fire in clumps, so tasks booked an
		// interval apart often come back together). The start is taken
		// when it is due, not reserved ahead: a task that wakes late
		// then starts late, and never closer to the next start than an
		// interval.
		wait = max(wait, time.Millisecond)
		l.waiting(typ, 1)
		err = sleep(ctx, wait)
		l.waiting(typ, -1)
		if err != nil {
			return err
		}
	}
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
