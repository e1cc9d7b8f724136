package flow

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
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
}

// takeSlot creates one free slot key of the limit of n slots: the slots
// the view does not show taken, from a random one on. A slot taken meanwhile
// fails the create (compare-and-set) and the next one is tried. When none
// is free it returns a *DeniedError: the caller parks the task in the
// limit's waiting room (Park), where a released slot is handed to it.
func (l *Limiter) takeSlot(ctx context.Context, typ, key string, n int, value []byte, lease *Lease) error {
	limit := "concurrency"
	if key != "" {
		limit = "key_concurrency"
	}
	ok, err := l.scanSlots(ctx, typ, key, n, value, lease, limit)
	if ok || err != nil {
		return err
	}
	return &DeniedError{Limit: limit, Type: typ}
}

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
