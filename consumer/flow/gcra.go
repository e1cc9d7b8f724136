package flow

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// instant is a rate or queue key's value (Unix nanoseconds) at a revision
// (0: the key is absent).
type instant struct {
	at  time.Time
	rev uint64
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
