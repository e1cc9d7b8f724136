package producer_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/spoolq/spool/producer"
	spool "github.com/spoolq/spool/shared"
	"github.com/spoolq/spool/shared/jsproto"
)

func TestBatch10000LandsWhole(t *testing.T) {
	t.Parallel()
	e := startEnv(t)
	ctx := ctxFor(t)
	const n = 10_000
	tasks := make([]producer.Task, n)
	for i := range tasks {
		tasks[i] = producer.Task{
			Type: "bulk.item", Priority: new(spool.Priorities[i%len(spool.Priorities)]),
			Payload: fmt.Appendf(nil, "item-%d", i), ID: fmt.Sprintf("item-%05d", i),
		}
	}
	results, err := e.client.EnqueueBatch(ctx, tasks)
	if err != nil {
		t.Fatalf("batch: %v", err)
	}
	if len(results) != n {
		t.Fatalf("%d results", len(results))
	}
	seqs := make(map[uint64]bool, n)
	for i, r := range results {
		if r.Err != nil || r.ID != tasks[i].ID || r.Duplicate || r.Sequence == 0 {
			t.Fatalf("result %d: %+v", i, r)
		}
		seqs[r.Sequence] = true
	}
	if len(seqs) != n {
		t.Fatalf("%d distinct sequences", len(seqs))
	}
	if got := e.streamMsgs(t); got != n {
		t.Fatalf("stream holds %d tasks, want %d", got, n)
	}
	for _, p := range spool.Priorities {
		if got := e.subjectCount(t, e.names.PriorityFilter(p)); got != n/5 {
			t.Errorf("%s holds %d", p, got)
		}
	}
	// The same batch again stores nothing new.
	results, err = e.client.EnqueueBatch(ctx, tasks[:100])
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range results {
		if !r.Duplicate {
			t.Fatalf("re-sent task %d not a duplicate: %+v", i, r)
		}
	}
	if got := e.streamMsgs(t); got != n {
		t.Fatalf("stream holds %d tasks after the re-send", got)
	}
}

func TestBatchReportsEachOutcome(t *testing.T) {
	t.Parallel()
	e := newEnv(t, embeddedDefaults(), settingsDefaults(), producer.WithPublishWindow(2))
	ctx := ctxFor(t)
	if _, err := e.client.Enqueue(ctx, producer.NewTask("held", nil), producer.TaskID("holder"), producer.Unique("taken", time.Hour)); err != nil {
		t.Fatal(err)
	}
	tasks := []producer.Task{
		{Type: "ok", ID: "t0"},
		{Type: "bad type"},
		{Type: "ok", ID: "t2", UniqueKey: "taken", UniqueTTL: time.Hour},
		{Type: "ok", ID: "t3", UniqueKey: "free", UniqueTTL: time.Hour},
		{Type: "ok", ID: "t0"},
		{Type: "later", ID: "t5", Delay: time.Hour},
		{Type: "ok", Priority: new(spool.Priority(7))},
	}
	results, err := e.client.EnqueueBatch(ctx, tasks)
	var be *producer.BatchError
	if !errors.As(err, &be) || be.Failed != 3 || be.Total != 7 || !errors.Is(err, producer.ErrInvalidType) {
		t.Fatalf("batch error %v", err)
	}
	check := func(i int, wantErr error) {
		t.Helper()
		if wantErr == nil && results[i].Err != nil || !errors.Is(results[i].Err, wantErr) {
			t.Errorf("task %d: want %v, got %v", i, wantErr, results[i].Err)
		}
	}
	check(0, nil)
	check(1, producer.ErrInvalidType)
	check(2, producer.ErrUniqueConflict)
	check(3, nil)
	check(4, nil)
	check(5, nil)
	check(6, producer.ErrInvalidPriority)
	var conflict *producer.UniqueConflictError
	if !errors.As(results[2].Err, &conflict) || conflict.ExistingID != "holder" {
		t.Errorf("conflict %v", results[2].Err)
	}
	if results[0].Duplicate || !results[4].Duplicate || results[4].Sequence != results[0].Sequence {
		t.Errorf("duplicate in batch: %+v %+v", results[0], results[4])
	}
	if !results[5].Scheduled || results[5].Subject != "spool.sched.t5" {
		t.Errorf("scheduled in batch: %+v", results[5])
	}
	if holder, _ := e.uniqueHolder(t, "free"); holder != "t3" {
		t.Errorf("unique key of t3 held by %q", holder)
	}
	// holder, t0, t3, t5's schedule
	if n := e.streamMsgs(t); n != 4 {
		t.Errorf("stream holds %d messages, want 4", n)
	}
}

func TestCloseReleasesTheReplySubscription(t *testing.T) {
	t.Parallel()
	e := startEnv(t)
	c, err := producer.New(e.nc)
	if err != nil {
		t.Fatal(err)
	}
	before := e.nc.NumSubscriptions()
	if _, err := c.EnqueueBatch(ctxFor(t), []producer.Task{producer.NewTask("a", nil)}); err != nil {
		t.Fatal(err)
	}
	if got := e.nc.NumSubscriptions(); got != before+1 {
		t.Fatalf("%d subscriptions after a batch, want %d", got, before+1)
	}
	c.Close()
	if got := e.nc.NumSubscriptions(); got != before {
		t.Fatalf("%d subscriptions after Close, want %d", got, before)
	}
	if e.nc.IsClosed() {
		t.Fatal("Close closed the connection")
	}
	if _, err := c.EnqueueBatch(ctxFor(t), []producer.Task{producer.NewTask("a", nil)}); err != nil {
		t.Fatalf("batch after Close: %v", err)
	}
}

func TestBatchTaskRefusedMidBatch(t *testing.T) {
	t.Parallel()
	e := startEnv(t)
	ctx := ctxFor(t)
	e.shrinkMaxMsgSize(t, 1024)
	results, err := e.client.EnqueueBatch(ctx, []producer.Task{
		{Type: "small", ID: "a"},
		{Type: "big", ID: "b", Payload: make([]byte, 4096), UniqueKey: "k", UniqueTTL: time.Hour},
		{Type: "small", ID: "c"},
	})
	var be *producer.BatchError
	if !errors.As(err, &be) || be.Failed != 1 || !errors.Is(err, producer.ErrPayloadTooLarge) {
		t.Fatalf("batch error %v", err)
	}
	if results[0].Err != nil || results[2].Err != nil || results[0].Sequence == 0 || results[2].Sequence != results[0].Sequence+1 {
		t.Fatalf("stored tasks: %+v %+v", results[0], results[2])
	}
	if holder, ok := e.uniqueHolder(t, "k"); ok {
		t.Fatalf("unique key still held by %q after the server refused the task", holder)
	}
	if n := e.streamMsgs(t); n != 3 {
		t.Fatalf("stream holds %d messages, want 3", n)
	}
}

// lostAckEnv returns a client (with opts) whose task stream is gone after
// the client looked it up, and a subscriber that receives its task
// publishes without answering: their acks never come.
func lostAckEnv(t *testing.T, opts ...producer.Option) (*env, *producer.Client) {
	t.Helper()
	e := startEnv(t)
	c, err := producer.New(e.nc, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	e.deleteTaskStream(t, c)
	sub, err := e.nc.SubscribeSync(e.names.PriorityFilter(spool.Normal)) // the tasks below (the zero priority)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	return e, c
}

func checkLostAck(t *testing.T, e *env, r producer.BatchResult, cause error) {
	t.Helper()
	if !errors.Is(r.Err, cause) || !strings.Contains(r.Err.Error(), "may be stored") {
		t.Fatalf("want a lost ack (%v), got %+v", cause, r)
	}
	if holder, _ := e.uniqueHolder(t, "lost"); holder != r.ID {
		t.Fatalf("unique key of a task that may be stored held by %q, want %q", holder, r.ID)
	}
}

func TestBatchAckThatNeverComesTimesOut(t *testing.T) {
	t.Parallel()
	// A window of one: the second task waits for room until the first's
	// ack is given up.
	e, c := lostAckEnv(t, producer.WithTimeout(300*time.Millisecond), producer.WithPublishWindow(1))
	// Sent again until the caller's deadline, then given up as
	// unavailable.
	ctx, cancel := context.WithTimeout(ctxFor(t), 1500*time.Millisecond)
	defer cancel()
	results, err := c.EnqueueBatch(ctx, []producer.Task{
		{Type: "a", ID: "t1", UniqueKey: "lost", UniqueTTL: time.Hour},
		{Type: "a", ID: "t2"},
	})
	var be *producer.BatchError
	if !errors.As(err, &be) || be.Failed != 2 {
		t.Fatalf("batch error %v", err)
	}
	checkLostAck(t, e, results[0], jetstream.ErrAsyncPublishTimeout)
	if !errors.Is(results[0].Err, jsproto.ErrUnavailable) {
		t.Fatalf("first task: %v, want it to say the cluster was unavailable", results[0].Err)
	}
	if !errors.Is(results[1].Err, jetstream.ErrAsyncPublishTimeout) {
		t.Fatalf("second task: %+v", results[1])
	}
}

func TestBatchAckThatNeverComesEndsWithTheContext(t *testing.T) {
	t.Parallel()
	e, c := lostAckEnv(t, producer.WithTimeout(time.Minute))
	ctx, cancel := context.WithTimeout(ctxFor(t), 300*time.Millisecond)
	defer cancel()
	results, _ := c.EnqueueBatch(ctx, []producer.Task{{Type: "a", ID: "t1", UniqueKey: "lost", UniqueTTL: time.Hour}})
	checkLostAck(t, e, results[0], context.DeadlineExceeded)
}

func TestBatchWithoutTheTaskStream(t *testing.T) {
	t.Parallel()
	e := startEnv(t)
	e.deleteTaskStream(t, e.client)
	results, err := e.client.EnqueueBatch(ctxFor(t), []producer.Task{
		{Type: "a", ID: "t1", UniqueKey: "k", UniqueTTL: time.Hour},
		{Type: "a", ID: "t2"},
	})
	if !errors.Is(err, producer.ErrNotProvisioned) {
		t.Fatalf("want ErrNotProvisioned, got %v", err)
	}
	for i, r := range results {
		if !errors.Is(r.Err, producer.ErrNotProvisioned) {
			t.Fatalf("task %d: %+v", i, r)
		}
	}
	if holder, ok := e.uniqueHolder(t, "k"); ok {
		t.Fatalf("unique key still held by %q after the publish failed", holder)
	}
}
