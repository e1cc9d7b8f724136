package producer_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/spoolq/spool/producer"
	spool "github.com/spoolq/spool/shared"
)

func TestEnqueueAsyncStreamsTasksWithOutcomes(t *testing.T) {
	t.Parallel()
	e := startEnv(t)
	ctx := ctxFor(t)
	const n = 3000 // below the default window, so nothing waits for room
	pending := make([]*producer.Pending, 0, n)
	for i := range n {
		p, err := e.client.EnqueueAsync(ctx, producer.Task{Type: "stream.item", ID: fmt.Sprintf("s-%04d", i), Payload: []byte("x")})
		if err != nil {
			t.Fatalf("task %d: %v", i, err)
		}
		pending = append(pending, p)
	}
	select {
	case <-e.client.EnqueueAsyncComplete():
	case <-ctx.Done():
		t.Fatal("acknowledgements did not all arrive")
	}
	seqs := make(map[uint64]bool, n)
	for i, p := range pending {
		r, err := p.Wait(ctx)
		if err != nil || r.ID != p.ID() || r.ID != fmt.Sprintf("s-%04d", i) || r.Sequence == 0 || r.Duplicate {
			t.Fatalf("task %d: %+v, %v", i, r, err)
		}
		again, err := p.Wait(ctx)
		if err != nil || again != r {
			t.Fatalf("task %d waited again: %+v, %v", i, again, err)
		}
		seqs[r.Sequence] = true
	}
	if len(seqs) != n {
		t.Fatalf("%d distinct sequences", len(seqs))
	}
	if got := e.streamMsgs(t); got != n {
		t.Fatalf("stream holds %d tasks, want %d", got, n)
	}
	// The same id again is stored once: a duplicate.
	p, err := e.client.EnqueueAsync(ctx, producer.Task{Type: "stream.item", ID: "s-0000"})
	if err != nil {
		t.Fatal(err)
	}
	if r, err := p.Wait(ctx); err != nil || !r.Duplicate {
		t.Fatalf("enqueued again: %+v, %v", r, err)
	}
}

func TestEnqueueAsyncRefusesABadTaskAtOnce(t *testing.T) {
	t.Parallel()
	e := startEnv(t)
	p, err := e.client.EnqueueAsync(ctxFor(t), producer.Task{ID: "no-type"})
	if !errors.Is(err, producer.ErrInvalidType) {
		t.Fatalf("want ErrInvalidType, got %v", err)
	}
	if _, werr := p.Wait(ctxFor(t)); werr == nil {
		t.Fatal("a task never published reports an outcome")
	}
	if got := e.streamMsgs(t); got != 0 {
		t.Fatalf("stream holds %d tasks", got)
	}
}

func TestEnqueueAsyncCompleteGivesUpAnAckThatNeverComes(t *testing.T) {
	t.Parallel()
	e, c := lostAckEnv(t, producer.WithTimeout(300*time.Millisecond))
	p, err := c.EnqueueAsync(ctxFor(t), producer.Task{Type: "a", ID: "t1", UniqueKey: "lost", UniqueTTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	// Nobody waits: the sweep gives the publish up after the timeout.
	select {
	case <-c.EnqueueAsyncComplete():
	case <-ctxFor(t).Done():
		t.Fatal("EnqueueAsyncComplete never fired")
	}
	ctx, cancel := context.WithTimeout(ctxFor(t), 600*time.Millisecond)
	defer cancel()
	_, err = p.Wait(ctx)
	checkLostAck(t, e, producer.BatchResult{EnqueueResult: producer.EnqueueResult{ID: p.ID()}, Err: err}, jetstream.ErrAsyncPublishTimeout)
}

// The enqueued event goes out when the stream acknowledges the task, even
// when nobody waits for its Pending.
func TestEnqueueAsyncAnnouncesWithoutWait(t *testing.T) {
	t.Parallel()
	e := startEnv(t)
	ctx := ctxFor(t)
	sub, err := e.nc.SubscribeSync(e.names.EventSubject(spool.EventEnqueued, spool.Normal, "quiet-1", "a"))
	if err != nil {
		t.Fatal(err)
	}
	if err := e.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	if _, err := e.client.EnqueueAsync(ctx, producer.Task{Type: "a", ID: "quiet-1"}); err != nil {
		t.Fatal(err)
	}
	m, err := sub.NextMsg(10 * time.Second)
	if err != nil {
		t.Fatalf("no enqueued event: %v", err)
	}
	var ev spool.Event
	if err := json.Unmarshal(m.Data, &ev); err != nil || ev.Event != spool.EventEnqueued || ev.Task.ID != "quiet-1" || ev.Task.State != spool.StatePending {
		t.Fatalf("event %s: %v", m.Data, err)
	}
}

// A client made WithEnqueuedEvents(false) stores its tasks and announces
// none of them; another client on the same connection still does.
func TestWithoutEnqueuedEvents(t *testing.T) {
	t.Parallel()
	e := startEnv(t)
	ctx := ctxFor(t)
	quiet, err := producer.New(e.nc, producer.WithNames(e.names), producer.WithEnqueuedEvents(false))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(quiet.Close)
	sub, err := e.nc.SubscribeSync(e.names.EventSubject(spool.EventEnqueued, spool.Normal, "*", "silent"))
	if err != nil {
		t.Fatal(err)
	}
	if err := e.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	// Enqueue announces before it returns, so an event of the quiet task
	// would reach the subscription before the loud one's: one connection
	// keeps its publishes in order.
	if res, err := quiet.Enqueue(ctx, producer.Task{Type: "silent", ID: "quiet-2"}); err != nil || res.Duplicate {
		t.Fatalf("quiet enqueue: %+v, %v", res, err)
	}
	if _, err := e.client.Enqueue(ctx, producer.Task{Type: "silent", ID: "loud-2"}); err != nil {
		t.Fatal(err)
	}
	m, err := sub.NextMsg(10 * time.Second)
	if err != nil {
		t.Fatalf("no enqueued event: %v", err)
	}
	var ev spool.Event
	if err := json.Unmarshal(m.Data, &ev); err != nil || ev.Task.ID != "loud-2" {
		t.Fatalf("first enqueued event %s (%v), want loud-2's", m.Data, err)
	}
}
