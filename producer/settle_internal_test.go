package producer

import (
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/spoolq/spool/streams"
	"github.com/spoolq/spool/streams/embedded"
	"github.com/spoolq/spool/streams/streamstest"
)

// TestSettleFlightLeavesFlightsToTheLock: a publish whose acknowledgement
// was lost is sent again by Wait, while a reader holding the batch from
// before (the sweep's expireOverdue, which collects overdue batches and
// expires them after releasing acks.mu; a no-responders republish) reads
// its flights under acks.mu. The retry's outcome must not be written into
// the batch: under -race that write was reported against the sweep's read
// (seen in a node-loss run), and nothing reads it there.
func TestSettleFlightLeavesFlightsToTheLock(t *testing.T) {
	t.Parallel()
	e := streamstest.StartWith(t, embedded.Options{}, streams.Settings{})
	c, err := New(e.NC, WithTimeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	ctx := streamstest.Context(t)
	_, limit, err := c.taskStream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	p, err := c.prepare(Task{Type: "settle.race", ID: "settle-race-1"}, time.Now(), limit, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, err := c.acks.open(1)
	if err != nil {
		t.Fatal(err)
	}
	// The acknowledgement of the first publish is lost: nothing listens
	// for it any more.
	if err := c.acks.pub.Close(); err != nil {
		t.Fatal(err)
	}
	if err := c.acks.publish(ctx, b, 0, p, false); err != nil {
		t.Fatal(err)
	}
	if n := c.acks.expire(b, time.Time{}, jetstream.ErrAsyncPublishTimeout); n != 1 {
		t.Fatalf("%d flights given up, want 1", n)
	}

	// The stale reader: it reads the flight under acks.mu until the
	// settling is over (or it sees the flight rewritten).
	var done atomic.Bool
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		deadline := time.Now().Add(30 * time.Second)
		for !done.Load() && time.Now().Before(deadline) {
			c.acks.mu.Lock()
			s := b.flights[0].state
			c.acks.mu.Unlock()
			if s != lost {
				return
			}
			runtime.Gosched()
		}
	}()
	res, err := (&Pending{c: c, b: b, id: p.id}).Wait(ctx)
	done.Store(true)
	wg.Wait()
	if err != nil {
		t.Fatalf("sent again: %v", err)
	}
	// The first publish was stored; the one sent again is its duplicate.
	if res.Sequence != 1 || !res.Duplicate {
		t.Errorf("sent again: seq %d duplicate %v, want seq 1 duplicate true", res.Sequence, res.Duplicate)
	}
	if state := b.flights[0].state; state != lost {
		t.Errorf("the batch's flight was rewritten outside acks.mu: state %d", state)
	}
}
