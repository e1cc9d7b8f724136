package flow

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/spoolq/spool/shared/limits"
)

// Concurrency slots: the view of the slots taken, the tasks waiting in
// this worker for one, and taking one.

// onSlot updates the view of taken slots from a change of a slot key.
func (l *Limiter) onSlot(m *nats.Msg) {
	key := m.Subject[len(l.subj):]
	op := m.Header.Get("KV-Operation")
	l.mu.Lock()
	defer l.mu.Unlock()
	if op == "" {
		l.taken[key] = time.Now().Add(l.ttl)
		return
	}
	delete(l.taken, key)
	if i := strings.LastIndexByte(key, '.'); i > 0 {
		l.wakeLocked(key[:i])
		l.releasedLocked(key[:i], time.Now())
	}
}

// turnover tracks how often a limit's slots are released: an average of
// the gaps between the releases the view sees (every worker's).
type turnover struct {
	last time.Time
	gap  time.Duration // moving average; 0 until two releases were seen
}

// turnoverForget is how long a limit's turnover is kept without a
// release.
const turnoverForget = time.Minute

func (l *Limiter) releasedLocked(scope string, now time.Time) {
	t := l.turnover[scope]
	if t == nil {
		l.turnover[scope] = &turnover{last: now}
		return
	}
	g := now.Sub(t.last)
	if t.gap == 0 {
		t.gap = g
	} else {
		t.gap += (g - t.gap) / 8
	}
	t.last = now
}

// releaseGap is the average time between two releases of the limit's
// slots, or 0 when it is not known (fewer than two releases seen lately).
func (l *Limiter) releaseGap(scope string) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	if t := l.turnover[scope]; t != nil && time.Since(t.last) < turnoverForget {
		return t.gap
	}
	return 0
}

// wakeLocked wakes the first task waiting for a slot of the limit whose
// slot keys start with scope.
func (l *Limiter) wakeLocked(scope string) {
	if ws := l.waiters[scope]; len(ws) > 0 {
		close(ws[0])
		if len(ws) == 1 {
			delete(l.waiters, scope)
		} else {
			l.waiters[scope] = ws[1:]
		}
	}
}

// waitSlot waits up to localWait for a slot of scope (a limit of n slots)
// to be released, when fewer than min(n, Config.Waiters) tasks of this
// worker wait for it already; false when it did not wait.
func (l *Limiter) waitSlot(ctx context.Context, typ, scope string, n int) bool {
	l.mu.Lock()
	if len(l.waiters[scope]) >= min(n, l.waitersMax) {
		l.mu.Unlock()
		return false
	}
	ch := make(chan struct{})
	l.waiters[scope] = append(l.waiters[scope], ch)
	l.statsLocked(typ).Waiting++
	l.mu.Unlock()
	defer l.waiting(typ, -1)
	t := time.NewTimer(localWait)
	defer t.Stop()
	select {
	case <-ch:
		return true
	case <-t.C:
	case <-ctx.Done():
	}
	l.mu.Lock()
	ws := l.waiters[scope]
	for i, c := range ws {
		if c == ch {
			l.waiters[scope] = append(ws[:i:i], ws[i+1:]...)
			if len(l.waiters[scope]) == 0 {
				delete(l.waiters, scope)
			}
			break
		}
	}
	l.mu.Unlock()
	return ctx.Err() == nil
}

// takeSlot creates one free slot key of the limit of n slots: the slots
// the view does not show taken, from a random one on. A slot taken meanwhile
// fails the create (compare-and-set) and the next one is tried.
func (l *Limiter) takeSlot(ctx context.Context, typ, key string, n int, value []byte, lease *Lease) error {
	limit := "concurrency"
	if key != "" {
		limit = "key_concurrency"
	}
	scope := strings.TrimSuffix(limits.SlotFilter(typ, key), ".*")
	for waited := false; ; waited = true {
		ok, err := l.scanSlots(ctx, typ, key, n, value, lease, limit)
		if ok || err != nil {
			return err
		}
		if waited || !l.waitSlot(ctx, typ, scope, n) {
			return &DeniedError{Limit: limit, Type: typ, RetryAfter: l.bookSlot(ctx, typ, key, scope)}
		}
	}
}

// bookSlot books the return of a task turned away by a full concurrency
// limit in the limit's return queue (cq.<type>, kcq.<type>.<key>), one
// release gap after the return booked before it: a backlog comes back
// about as fast as the limit's slots free up, in the order it was turned
// away, rather than polling the limit. It returns how long until the
// booked return, or 0 (the caller's own backoff) when the limit's
// turnover is not known yet or the queue could not be written.
func (l *Limiter) bookSlot(ctx context.Context, typ, key, scope string) time.Duration {
	gap := l.releaseGap(scope)
	if gap <= 0 {
		return 0
	}
	gap = min(gap, maxSlotGap)
	back, _, err := l.gcra(ctx, limits.SlotQueueKey(typ, key), gap, gap, 0, true)
	if err != nil {
		return 0
	}
	return max(back, time.Millisecond)
}

// maxSlotGap bounds the spacing of a concurrency limit's booked returns.
const maxSlotGap = 5 * time.Second

// scanSlots tries the slots the view shows free; ok when one was taken.
func (l *Limiter) scanSlots(ctx context.Context, typ, key string, n int, value []byte, lease *Lease, limit string) (ok bool, err error) {
	start := rand.IntN(n)
	for i := range n {
		k := limits.SlotKey(typ, key, (start+i)%n)
		now := time.Now()
		l.mu.Lock()
		until, seen := l.taken[k]
		if seen && now.After(until) {
			delete(l.taken, k)
			seen = false
		}
		l.mu.Unlock()
		if seen {
			continue
		}
		rctx, cancel := context.WithTimeout(ctx, l.io)
		rev, err := l.leases.Create(rctx, k, value, jetstream.KeyTTL(l.ttl))
		cancel()
		switch {
		case err == nil:
			l.mu.Lock()
			l.taken[k] = now.Add(l.ttl)
			l.mu.Unlock()
			lease.add(k, rev)
			return true, nil
		case errors.Is(err, jetstream.ErrKeyExists):
			// Held by another task. Its release may already have been
			// seen (the answer to this create can come after it), so the
			// view holds the slot taken only briefly: the holder's own
			// changes keep it right from there.
			l.mu.Lock()
			if until := now.Add(staleHint); l.taken[k].Before(until) {
				l.taken[k] = until
			}
			l.mu.Unlock()
		default:
			return false, fmt.Errorf("taking a %s slot of %q: %w", limit, typ, err)
		}
	}
	return false, nil
}
