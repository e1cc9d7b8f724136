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
// come back one interval apart, in the order they were turned away, so a
// backlog is handed back about once per task instead of polling the limit.
func (l *Limiter) takeRate(ctx context.Context, typ, key string, r limits.Rate, limit string) error {
	iv := r.Interval()
	var wait time.Duration
	for waited := time.Duration(0); ; waited += wait {
		var err error
		wait, err = l.gcra(ctx, limits.RateKey(typ, key), iv, time.Duration(r.BurstOrOne())*iv, 0, false)
		if err != nil {
			return fmt.Errorf("%s limit of %q: %w", limit, typ, err)
		}
		if wait == 0 {
			return nil
		}
		if wait > localWait || waited+wait > localWait {
			break
		}
		// The next start is due soon: wait for it here rather than hand
		// the task back (schedules fire in clumps, so tasks booked an
		// interval apart often come back together).
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
	back, err := l.gcra(ctx, limits.QueueKey(typ, key), iv, iv, wait, true)
	if err != nil {
		back = wait
	}
	return &DeniedError{Limit: limit, Type: typ, RetryAfter: back}
}

// gcra runs one step of the generic cell-rate algorithm on key k. Without
// book, it takes a start when one is due (returning 0) and otherwise
// returns how long until one is, leaving k alone. With book, it always
// advances k, from no earlier than now+after, and returns how long until
// the booked time.
func (l *Limiter) gcra(ctx context.Context, k string, iv, burst, after time.Duration, book bool) (time.Duration, error) {
	h := fnv.New32a()
	h.Write([]byte(k))
	lock := l.rateLocks[h.Sum32()%uint32(len(l.rateLocks))]
	select {
	case lock <- struct{}{}:
	case <-ctx.Done():
		return 0, ctx.Err()
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
			return 0, fmt.Errorf("reading %q: %w", k, err)
		}
		next := tat.Add(iv)
		wait := next.Sub(now) - burst
		if !book && wait > 0 {
			cancel()
			return wait, nil
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
				return tat.Sub(now), nil
			}
			return 0, nil
		case errors.Is(err, jetstream.ErrKeyExists), isWrongLastSeq(err):
			continue // another worker moved it: read again
		default:
			return 0, fmt.Errorf("writing %q: %w", k, err)
		}
	}
	if book {
		return 0, fmt.Errorf("%q kept changing: gave up after %d tries", k, casTries)
	}
	return iv, nil
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
