package consumer_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/spoolq/spool/consumer"
	"github.com/spoolq/spool/shared/workflow"
	"github.com/spoolq/spool/streams/streamstest"
)

// Cancel: the running step finishes, the rest are cancelled, the workflow
// ends cancelled.
func TestWorkflowCancel(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	started := make(chan struct{})
	mux := arithmetic()
	mux.HandleFunc("block", func(ctx context.Context, task *consumer.Task) ([]byte, error) {
		close(started)
		<-release
		return []byte("1"), nil
	})
	e := newWFEnv(t, mux)
	var d workflow.Doc
	d.Chain(workflow.Task("first", "block", nil), workflow.Task("second", "add1", nil), workflow.Task("third", "add1", nil))
	id := e.submit(d)
	<-started
	if _, err := e.store.Cancel(testCtx(t), id); err != nil {
		t.Fatal(err)
	}
	close(release)
	st := e.wait(id, workflow.Cancelled)
	for name, s := range map[string]workflow.State{"first": workflow.Completed, "second": workflow.Cancelled, "third": workflow.Cancelled} {
		if got := stepOf(t, st, name); got.State != s || got.Name != "first" && e.ran(got.TaskID) != 0 {
			t.Errorf("step %s %+v, want %s", name, got, s)
		}
	}
}

// A running step whose task is cancelled (Client.CancelWorkflow does this
// for the steps that run when a workflow is cancelled): its handler's
// context ends, the step ends cancelled, and the workflow advances to a
// final state instead of waiting for a step that will never report.
func TestWorkflowRunningStepCancelled(t *testing.T) {
	t.Parallel()
	started := make(chan string, 1)
	interrupted := make(chan error, 1)
	mux := arithmetic()
	mux.HandleFunc("block", func(ctx context.Context, task *consumer.Task) ([]byte, error) {
		started <- task.ID
		<-ctx.Done()
		interrupted <- context.Cause(ctx)
		return nil, ctx.Err()
	})
	e := newWFEnv(t, mux)
	var d workflow.Doc
	d.Chain(workflow.Task("first", "block", nil), workflow.Task("second", "add1", nil))
	id := e.submit(d)
	taskID := <-started
	e.cancel(taskID, "ops", "stuck")
	select {
	case cause := <-interrupted:
		if !errors.Is(cause, consumer.ErrCancelled) {
			t.Fatalf("handler context ended with %v, want consumer.ErrCancelled", cause)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the running step's handler was not interrupted")
	}
	var st workflow.Status
	streamstest.WaitFor(t, 30*time.Second, func() error {
		var err error
		if st, err = e.store.Status(testCtx(t), id); err != nil {
			return err
		}
		if !st.State.Terminal() {
			return fmt.Errorf("workflow %s, want a final state", st.State)
		}
		return nil
	})
	for name, want := range map[string]workflow.State{"first": workflow.Cancelled, "second": workflow.Cancelled} {
		if got := stepOf(t, st, name); got.State != want {
			t.Errorf("step %s %+v, want %s", name, got, want)
		}
	}
	if n := e.ran(stepOf(t, st, "second").TaskID); n != 0 {
		t.Errorf("the step after the cancelled one ran %d times", n)
	}
}
