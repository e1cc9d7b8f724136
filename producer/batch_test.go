package producer_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/spoolq/spool/producer"
	spool "github.com/spoolq/spool/shared"
)

func TestBatch10000LandsWhole(t *testing.T) {
	t.Parallel()
	e := startEnv(t)
	ctx := ctxFor(t)
	const n = 10_000
	tasks := make([]producer.Task, n)
	for i := range tasks {
		tasks[i] = producer.Task{
			Type: "bulk.item", Priority: spool.Priorities[i%len(spool.Priorities)],
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
		{Type: "ok", Priority: 7},
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
