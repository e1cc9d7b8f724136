package control_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/spoolq/spool/consumer"
	"github.com/spoolq/spool/shared/workflow"
	"github.com/spoolq/spool/streams/streamstest"
)

// CancelWorkflow cancels every step: the one running has its handler's
// context cancelled (its task is cancelled), the ones after it never run,
// and the workflow ends cancelled without waiting for the running step to
// finish on its own.
func TestCancelWorkflowInterruptsRunningStep(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	ctx := streamstest.Context(t)
	started := make(chan struct{})
	interrupted := make(chan error, 1)
	ran := make(chan string, 4)
	mux := consumer.NewMux()
	mux.HandleFunc("wf.block", func(ctx context.Context, task *consumer.Task) ([]byte, error) {
		close(started)
		<-ctx.Done()
		interrupted <- context.Cause(ctx)
		return nil, ctx.Err()
	})
	mux.HandleFunc("wf.after", func(ctx context.Context, task *consumer.Task) ([]byte, error) {
		ran <- task.ID
		return nil, nil
	})
	s.worker(t, mux)

	var d workflow.Doc
	d.Chain(workflow.Task("block", "wf.block", nil), workflow.Task("after", "wf.after", nil))
	id, err := s.client.SubmitWorkflow(ctx, d)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-started:
	case <-ctx.Done():
		t.Fatal("the first step never started")
	}
	if _, err := s.client.CancelWorkflow(ctx, id); err != nil {
		t.Fatal(err)
	}
	select {
	case cause := <-interrupted:
		if !errors.Is(cause, consumer.ErrCancelled) {
			t.Fatalf("the running step's context ended with %v, want consumer.ErrCancelled", cause)
		}
	case <-ctx.Done():
		t.Fatal("the running step was not interrupted")
	}
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	st, err := s.client.WaitWorkflow(wctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if st.State != workflow.Cancelled {
		t.Fatalf("workflow %s, want cancelled", st.State)
	}
	for _, step := range st.Steps {
		if step.State != workflow.Cancelled {
			t.Errorf("step %s is %s, want cancelled", step.Name, step.State)
		}
	}
	select {
	case taskID := <-ran:
		t.Fatalf("the step after the cancelled one ran (task %s)", taskID)
	default:
	}
}
