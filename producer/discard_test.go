package producer_test

import (
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/spoolq/spool/producer"
	spool "github.com/spoolq/spool/shared"
)

// The result policy travels as Spool-Result, and a policy that is neither
// keep nor discard is refused before anything is published.
func TestEnqueueResultPolicy(t *testing.T) {
	t.Parallel()
	e := startEnv(t)
	ctx := ctxFor(t)
	for _, c := range []struct {
		opt  producer.EnqueueOption
		want string
	}{
		{producer.DiscardResult(), "discard"},
		{producer.KeepResult(), "keep"},
		{producer.TaskID("plain"), ""},
	} {
		res, err := e.client.Enqueue(ctx, producer.NewTask("report.build", nil), c.opt)
		if err != nil {
			t.Fatal(err)
		}
		m, err := e.tasks.GetMsg(ctx, res.Sequence)
		if err != nil {
			t.Fatal(err)
		}
		if got := m.Header.Get(spool.HeaderResult); got != c.want {
			t.Errorf("task %s: Spool-Result %q, want %q", res.ID, got, c.want)
		}
	}
	before := e.streamMsgs(t)
	_, err := e.client.Enqueue(ctx, producer.Task{Type: "report.build", ResultPolicy: "forget"})
	var fe *producer.InvalidTaskError
	if !errors.As(err, &fe) || fe.Field != "result_policy" || fe.Code != spool.CodeInvalidResultPolicy || !errors.Is(err, spool.ErrInvalidResultPolicy) {
		t.Fatalf("a bad result policy: %v", err)
	}
	if n := e.streamMsgs(t); n != before {
		t.Fatalf("the refused task was published: %d messages, want %d", n, before)
	}
}

// A task whose result was discarded answers Result, Wait and Cancel with
// what its marker says: it completed. A Wait opened before the task
// completes returns as the marker is written, one opened after returns at
// once. A plain delete of a document is no such marker: the task has no
// result yet, and Cancel writes over the delete.
func TestResultDiscarded(t *testing.T) {
	t.Parallel()
	e := startEnv(t)
	ctx := ctxFor(t)
	done := make(chan error, 1)
	go func() {
		_, err := e.client.Wait(ctx, "gone-1")
		done <- err
	}()
	e.putResult(t, spool.Result{ID: "gone-1", Type: "a", State: spool.StateRetrying})
	select {
	case err := <-done:
		t.Fatalf("Wait returned at state retrying: %v", err)
	case <-time.After(100 * time.Millisecond):
	}
	e.putDiscardedMarker(t, "gone-1")
	select {
	case err := <-done:
		var de *producer.ResultDiscardedError
		if !errors.Is(err, producer.ErrResultDiscarded) || !errors.As(err, &de) || de.ID != "gone-1" || de.CompletedAt.IsZero() {
			t.Fatalf("Wait: %v, want a ResultDiscardedError", err)
		}
	case <-time.After(producer.WaitRecheck - time.Second):
		t.Fatal("Wait did not return as the marker was written")
	}

	if _, err := e.client.Wait(ctx, "gone-1"); !errors.Is(err, producer.ErrResultDiscarded) {
		t.Fatalf("Wait after the marker: %v", err)
	}
	if r, err := e.client.Result(ctx, "gone-1"); !errors.Is(err, producer.ErrResultDiscarded) || r.State != "" {
		t.Fatalf("Result: %+v, %v", r, err)
	}
	r, err := e.client.Cancel(ctx, "gone-1")
	if !errors.Is(err, producer.ErrTaskFinished) || r.State != spool.StateCompleted || !r.ResultDiscarded {
		t.Fatalf("Cancel: %+v, %v", r, err)
	}
	if _, err := e.client.Result(ctx, "gone-1"); !errors.Is(err, producer.ErrResultDiscarded) {
		t.Fatalf("after a cancel that came too late: %v", err)
	}

	// A queued task whose key holds a deleted document: no marker, so
	// no result yet, and Cancel writes over the delete.
	if _, err := e.client.Enqueue(ctx, producer.NewTask("report.build", nil), producer.TaskID("deleted-1")); err != nil {
		t.Fatal(err)
	}
	e.putResult(t, spool.Result{ID: "deleted-1", Type: "report.build", State: spool.StateCompleted})
	kv, err := e.js.KeyValue(ctx, e.names.ResultsBucket())
	if err != nil {
		t.Fatal(err)
	}
	if err := kv.Delete(ctx, "deleted-1"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.client.Result(ctx, "deleted-1"); !errors.Is(err, producer.ErrTaskNotFound) {
		t.Fatalf("a deleted document: %v, want ErrTaskNotFound", err)
	}
	if r, err := e.client.Cancel(ctx, "deleted-1", producer.CancelBy("ada")); err != nil || r.State != spool.StateCancelled || r.CancelledBy != "ada" {
		t.Fatalf("Cancel over a deleted document: %+v, %v", r, err)
	}
}

// putDiscardedMarker writes the marker a worker leaves for a task whose
// result is discarded.
func (e *env) putDiscardedMarker(t testing.TB, id string) {
	t.Helper()
	m := &nats.Msg{Subject: e.names.ResultSubject(id), Header: nats.Header{}}
	spool.SetDiscardedMarker(m.Header)
	if _, err := e.js.PublishMsg(ctxFor(t), m); err != nil {
		t.Fatal(err)
	}
}
