package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	spool "github.com/spoolq/spool/shared"
)

// rawKeyed is the floor of a per-key limit of 1: raw + results with a
// pool of conc goroutines, each of which takes a slot for the task's key
// (Spool-Key) in the leases bucket with a KV create carrying a TTL, stores
// the result, acks the task once the result is stored and frees the slot
// with a delete at the slot's revision, sent without waiting for its
// acknowledgement. A key already held sends the task back with a short
// NAK delay. With -key-slots=false the same pool skips the slot, so the
// two runs price the slot alone.
func rawKeyed(ctx context.Context, js jetstream.JetStream, names spool.Names, f consumeFlags, rep *consumeReport) error {
	name := f.consumer
	if name == "" {
		name = names.Consumer(spool.Normal)
	}
	cons, err := js.Consumer(ctx, names.TaskStream(), name)
	if err != nil {
		return fmt.Errorf("binding consumer: %w", err)
	}
	kv, err := js.KeyValue(ctx, names.LeasesBucket())
	if err != nil {
		return fmt.Errorf("binding the leases bucket: %w", err)
	}
	var got atomic.Uint64
	var runErr atomic.Value
	fail := func(err error) { runErr.CompareAndSwap(nil, err) }
	work := make(chan jetstream.Msg, f.conc)
	var wg sync.WaitGroup
	for range f.conc {
		wg.Go(func() {
			for m := range work {
				ran, err := rawKeyedTask(ctx, js, kv, names, m, f.keySlots)
				if err != nil {
					fail(err)
				}
				if ran || err != nil {
					got.Add(1)
				}
			}
		})
	}
	w := startWindow()
	cc, err := cons.Consume(func(m jetstream.Msg) { work <- m })
	if err != nil {
		close(work)
		wg.Wait()
		return fmt.Errorf("consuming: %w", err)
	}
	if err := drainCounted(ctx, js, cc, f.n, got.Load, w, rep); err != nil {
		return err
	}
	close(work)
	wg.Wait()
	err, _ = runErr.Load().(error)
	return err
}

// rawKeyedTask runs one task of rawKeyed, and says whether it ran (false:
// its key was held, and it was sent back).
func rawKeyedTask(ctx context.Context, js jetstream.JetStream, kv jetstream.KeyValue, names spool.Names, m jetstream.Msg, keySlots bool) (bool, error) {
	var slot string
	var rev uint64
	if key := m.Headers().Get(spool.HeaderKey); keySlots && key != "" {
		slot = "rawbench." + key
		r, err := kv.Create(ctx, slot, nil, jetstream.KeyTTL(time.Minute))
		if errors.Is(err, jetstream.ErrKeyExists) {
			return false, m.NakWithDelay(10 * time.Millisecond)
		}
		if err != nil {
			return false, fmt.Errorf("taking the slot of %q: %w", key, err)
		}
		rev = r
	}
	md, err := m.Metadata()
	if err != nil {
		return false, err
	}
	id := strconv.FormatUint(md.Sequence.Stream, 10)
	doc := fmt.Appendf(nil, `{"id":%q,"state":"completed","finished_at":%q}`, id, time.Now().UTC().Format(time.RFC3339Nano))
	put, err := js.PublishAsync(names.ResultSubject(id), doc, jetstream.WithStallWait(stallLimit))
	if err != nil {
		return false, fmt.Errorf("storing a result: %w", err)
	}
	select {
	case <-put.Ok():
	case err := <-put.Err():
		return false, fmt.Errorf("storing a result: %w", err)
	}
	if err := m.Ack(); err != nil {
		return false, err
	}
	if slot == "" {
		return true, nil
	}
	// Freed without waiting: a lost delete holds the key until its TTL.
	del := &nats.Msg{Subject: "$KV." + names.LeasesBucket() + "." + slot, Header: nats.Header{
		"KV-Operation":                      {"DEL"},
		jetstream.ExpectedLastSubjSeqHeader: {strconv.FormatUint(rev, 10)},
	}}
	if _, err := js.PublishMsgAsync(del, jetstream.WithStallWait(stallLimit)); err != nil {
		return true, fmt.Errorf("freeing the slot of %q: %w", slot, err)
	}
	return true, nil
}
