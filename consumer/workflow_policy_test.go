package consumer_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/spoolq/spool/consumer"
	spool "github.com/spoolq/spool/shared"
	"github.com/spoolq/spool/shared/workflow"
)

// policyDoc: "bad" fails once "slow" started; "after_bad" runs after it; "slow" (independent)
// completes only once the failure is recorded, then "after_slow" follows
// it; "notify" is the on-failure step.
func policyDoc(id string, p workflow.Policy) workflow.Doc {
	return workflow.Doc{ID: id, OnError: p, OnFailure: &workflow.Step{Name: "notify", Type: "notify", Priority: spool.Normal},
		Steps: []workflow.Step{
			workflow.Task("bad", "fail_after_slow", nil),
			{Name: "after_bad", Type: "add1", Priority: spool.Normal, After: []string{"bad"}, Inputs: true},
			workflow.Task("slow", "slow", nil),
			{Name: "after_slow", Type: "add1", Priority: spool.Normal, After: []string{"slow"}, Inputs: true},
		}}
}

func policyMux(e **wfEnv, notified chan<- workflow.StepInput) *consumer.Mux {
	mux := arithmetic()
	slowStarted := make(chan struct{})
	mux.HandleFunc("fail_after_slow", func(ctx context.Context, task *consumer.Task) ([]byte, error) {
		select {
		case <-slowStarted:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		return nil, consumer.Permanent(errors.New("boom"))
	})
	mux.HandleFunc("slow", func(ctx context.Context, task *consumer.Task) ([]byte, error) {
		close(slowStarted)
		return oneOnceFailed(ctx, (*e).store, task)
	})
	mux.HandleFunc("notify", func(ctx context.Context, task *consumer.Task) ([]byte, error) {
		in, err := workflow.DecodeInput(task.Payload)
		if err != nil {
			return nil, err
		}
		notified <- in
		return nil, nil
	})
	return mux
}

// Stop: after a failure, steps not started are cancelled, the on-failure
// step gets the error, the workflow fails.
func TestWorkflowPolicyStop(t *testing.T) {
	t.Parallel()
	notified := make(chan workflow.StepInput, 1)
	var e *wfEnv
	e = newWFEnv(t, policyMux(&e, notified), consumer.WithConcurrency(4, 8))
	id := e.submit(policyDoc("stop", workflow.Stop))
	st := e.wait(id, workflow.Failed)
	want := map[string]workflow.State{"bad": workflow.Failed, "after_bad": workflow.Cancelled, "slow": workflow.Completed,
		"after_slow": workflow.Cancelled, "notify": workflow.Completed}
	for name, s := range want {
		if got := stepOf(t, st, name).State; got != s {
			t.Errorf("step %s %s, want %s", name, got, s)
		}
	}
	in := <-notified
	if in.Failed == nil || in.Failed.Step != "bad" || !strings.Contains(in.Failed.Error, "boom") {
		t.Errorf("on-failure input %+v", in.Failed)
	}
	if st.Failure == nil || st.Failure.Step != "bad" {
		t.Errorf("failure %+v", st.Failure)
	}
}

// Continue: the independent branch runs on; only the failed step's
// dependants are cancelled.
func TestWorkflowPolicyContinue(t *testing.T) {
	t.Parallel()
	notified := make(chan workflow.StepInput, 1)
	var e *wfEnv
	e = newWFEnv(t, policyMux(&e, notified), consumer.WithConcurrency(4, 8))
	id := e.submit(policyDoc("cont", workflow.Continue))
	st := e.wait(id, workflow.Failed)
	want := map[string]workflow.State{"bad": workflow.Failed, "after_bad": workflow.Cancelled, "slow": workflow.Completed,
		"after_slow": workflow.Completed, "notify": workflow.Completed}
	for name, s := range want {
		if got := stepOf(t, st, name).State; got != s {
			t.Errorf("step %s %s, want %s", name, got, s)
		}
	}
	if r := string(stepOf(t, st, "after_slow").Task.Result); r != "2" {
		t.Errorf("after_slow result %s", r)
	}
	<-notified
}
