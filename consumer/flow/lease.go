package flow

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/spoolq/spool/shared/limits"
)

// Lease is the concurrency slots one running task holds. Release it when
// the handler returns. A nil *Lease is valid and holds nothing.
type Lease struct {
	l     *Limiter
	typ   string
	value []byte

	// op serialises renew and release: a delete must carry the revision
	// a renewal in flight is about to write, or it fails and the slot
	// stays taken until its TTL runs out.
	op       sync.Mutex
	mu       sync.Mutex
	slots    []slot
	released bool
}

type slot struct {
	key string
	rev uint64
	at  time.Time // when this worker wrote rev
}

// keep takes the lease's slots out of it, as grants for its task to
// carry while it waits (DeniedError.Kept).
func (le *Lease) keep() []Grant {
	le.mu.Lock()
	defer le.mu.Unlock()
	out := make([]Grant, 0, len(le.slots))
	for _, s := range le.slots {
		out = append(out, Grant{Slot: s.key, Rev: s.rev})
	}
	le.slots = nil
	return out
}

// add records slot k, written at revision rev just now.
func (le *Lease) add(k string, rev uint64) { le.addSlot(slot{k, rev, time.Now()}) }

func (le *Lease) addSlot(s slot) {
	le.mu.Lock()
	le.slots = append(le.slots, s)
	le.mu.Unlock()
}

// Release hands each slot on to the oldest task of its limit's waiting
// room (a write at the revision this lease wrote) or, with none waiting,
// frees it (a delete at that revision); either way a slot that expired and
// was taken by another task is left alone. It
// does not wait for the deletes: the caller's worker slot is free at once,
// and the limit's slot a round trip later (Limiter.Close waits for the
// deletes in flight). Errors are logged: the slot then expires with its
// TTL.
func (le *Lease) Release(ctx context.Context) {
	if le == nil {
		return
	}
	l := le.l
	l.mu.Lock()
	if _, ok := l.mine[le]; ok {
		delete(l.mine, le)
		l.statsLocked(le.typ).Held--
	}
	l.mu.Unlock()
	l.releasing.Add(1)
	go func() {
		defer l.releasing.Done()
		le.release(context.WithoutCancel(ctx))
	}()
}

func (le *Lease) release(ctx context.Context) {
	le.op.Lock()
	defer le.op.Unlock()
	le.mu.Lock()
	slots := le.slots
	le.slots, le.released = nil, true
	le.mu.Unlock()
	for _, s := range slots {
		le.l.releaseSlot(ctx, s)
	}
}

// renew restarts the TTL of every slot, at the revision this lease wrote
// last: a slot that is no longer ours (it expired) is not taken back.
func (le *Lease) renew(ctx context.Context) {
	le.op.Lock()
	defer le.op.Unlock()
	le.mu.Lock()
	slots := append([]slot(nil), le.slots...)
	le.mu.Unlock()
	l := le.l
	for i, s := range slots {
		rctx, cancel := context.WithTimeout(ctx, l.io)
		rev, err := l.put(rctx, s.key, le.value, s.rev, l.ttl)
		cancel()
		if err != nil {
			l.log.Warn("renewing a flow-control slot failed", "slot", s.key, "error", err)
			continue
		}
		le.mu.Lock()
		if !le.released && i < len(le.slots) && le.slots[i].key == s.key {
			le.slots[i].rev, le.slots[i].at = rev, time.Now()
		}
		le.mu.Unlock()
		l.mu.Lock()
		l.taken[s.key] = time.Now().Add(l.ttl)
		l.mu.Unlock()
	}
}

// put writes k if its last revision is still rev, with a per-key TTL (KV
// Update would drop the TTL).
func (l *Limiter) put(ctx context.Context, k string, val []byte, rev uint64, ttl time.Duration) (uint64, error) {
	return l.write(ctx, &nats.Msg{Subject: l.subj + k, Data: val, Header: nats.Header{
		jetstream.ExpectedLastSubjSeqHeader: {strconv.FormatUint(rev, 10)},
		jetstream.MsgTTLHeader:              {ttl.String()},
	}})
}

func isWrongLastSeq(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && (apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
		apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant)
}

// Concurrency slots: the view of the slots taken, and taking one.

// onSlot updates the view of taken slots from a change of a slot key.
func (l *Limiter) onSlot(m *nats.Msg) {
	key := m.Subject[len(l.subj):]
	op := m.Header.Get("KV-Operation")
	l.mu.Lock()
	defer l.mu.Unlock()
	if op == "" {
		l.taken[key] = time.Now().Add(l.ttl)
		delete(l.markers, key) // written again: the marker is not its last entry
		return
	}
	delete(l.taken, key)
	l.slotFreedLocked(key)
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
		rev, err := l.createSlotKey(rctx, k, value)
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
