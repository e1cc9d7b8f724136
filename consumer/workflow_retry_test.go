package consumer_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spoolq/spool/consumer"
	spool "github.com/spoolq/spool/shared"
	"github.com/spoolq/spool/shared/workflow"
)

// RetryFailed runs the failed step again under a new task id, and the
// workflow completes; completed steps keep their results and do not run
// again.
func TestWorkflowRetryFailed(t *testing.T) {
	t.Parallel()
	mux := arithmetic()
	mux.HandleFunc("flaky", func(ctx context.Context, task *consumer.Task) ([]byte, error) {
		if !strings.HasSuffix(task.ID, "=1") {
			return nil, consumer.Permanent(errors.New("first run fails"))
		}
		si, err := workflow.DecodeInput(task.Payload)
		if err != nil {
			return nil, err
		}
		return si.Inputs[0], nil
	})
	e := newWFEnv(t, mux)
	var d workflow.Doc
	d.Chain(workflow.Task("a", "add1", []byte("1")), workflow.Task("flaky", "flaky", nil), workflow.Task("c", "add1", nil))
	id := e.submit(d)
	st := e.wait(id, workflow.Failed)
	if s := stepOf(t, st, "c"); s.State != workflow.Cancelled {
		t.Fatalf("c %+v", s)
	}
	if _, err := e.store.RetryFailed(testCtx(t), id); err != nil {
		t.Fatal(err)
	}
	st = e.wait(id, workflow.Completed)
	if c := stepOf(t, st, "c"); string(c.Task.Result) != "3" || c.Run != 1 {
		t.Errorf("c after retry %+v", c)
	}
	if a := stepOf(t, st, "a"); e.ran(a.TaskID) != 1 || a.Run != 0 {
		t.Errorf("a ran %d times, run %d", e.ran(a.TaskID), a.Run)
	}
	if st.Retries != 1 {
		t.Errorf("retries %d", st.Retries)
	}
}

// retryCase is one workflow of TestWorkflowRetryCombinations: its failure
// policy, whether it has an on-failure step, how many times it is retried
// and whether the last retry's run of the failing step succeeds.
type retryCase struct {
	policy    workflow.Policy
	onFailure bool
	retries   int
	succeeds  bool
}

func (c retryCase) name() string {
	end := "failed"
	if c.succeeds {
		end = "completed"
	}
	withOF := "without_on_failure"
	if c.onFailure {
		withOF = "with_on_failure"
	}
	return fmt.Sprintf("%s_%s_retried_%d_%s", c.policy, withOF, c.retries, end)
}

// final is the state the workflow must end in after its last retry.
func (c retryCase) final() workflow.State {
	if c.succeeds {
		return workflow.Completed
	}
	return workflow.Failed
}

// failures is how many rounds ended failed: each one runs the on-failure
// step once.
func (c retryCase) failures() int {
	if c.succeeds {
		return c.retries
	}
	return c.retries + 1
}

// retryDoc is the workflow of a retryCase:
//
//	a ── flaky ── after_flaky      side ── later      on failure: notify
//
// flaky fails until its run reaches succeed_at. In the first round side
// completes only once flaky's failure is recorded, so later is cancelled
// under stop and runs under continue. In a retried round flaky ends only
// once later did, so later completes under both policies.
func retryDoc(id string, c retryCase) workflow.Doc {
	succeedAt := c.retries
	if !c.succeeds {
		succeedAt = -1
	}
	d := workflow.Doc{ID: id, OnError: c.policy, Steps: []workflow.Step{
		workflow.Task("a", "add1", []byte("1")),
		{Name: "flaky", Type: "flaky_run", Priority: spool.Normal, After: []string{"a"}, Inputs: true,
			Payload: fmt.Appendf(nil, `{"succeed_at":%d}`, succeedAt)},
		{Name: "after_flaky", Type: "add1", Priority: spool.Normal, After: []string{"flaky"}, Inputs: true},
		workflow.Task("side", "side_after_failure", nil),
		{Name: "later", Type: "add1", Priority: spool.Normal, After: []string{"side"}, Inputs: true},
	}}
	if c.onFailure {
		d.OnFailure = &workflow.Step{Name: "notify", Type: "notify_each", Priority: spool.Normal}
	}
	return d
}

// retryMux runs the steps of retryDoc; notified collects each on-failure
// run's input by workflow id.
type retryMux struct {
	e        **wfEnv
	mu       sync.Mutex
	notified map[string][]workflow.StepInput
}

func (m *retryMux) notifications(id string) []workflow.StepInput {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.notified[id]
}

func (m *retryMux) mux() *consumer.Mux {
	mux := arithmetic()
	mux.HandleFunc("flaky_run", func(ctx context.Context, task *consumer.Task) ([]byte, error) {
		si, err := workflow.DecodeInput(task.Payload)
		if err != nil {
			return nil, err
		}
		var p struct {
			SucceedAt int `json:"succeed_at"`
		}
		if err := json.Unmarshal(si.Payload, &p); err != nil {
			return nil, consumer.Permanent(err)
		}
		wf := task.Headers.Get(workflow.HeaderWorkflow)
		run := 0
		if _, tail, ok := strings.Cut(strings.TrimPrefix(task.ID, wf+"="), "="); ok {
			if _, err := fmt.Sscan(tail, &run); err != nil {
				return nil, consumer.Permanent(err)
			}
		}
		if run > 0 {
			if err := m.waitStep(ctx, wf, "later"); err != nil {
				return nil, err
			}
		}
		if run != p.SucceedAt {
			return nil, consumer.Permanent(fmt.Errorf("run %d fails", run))
		}
		return si.Inputs[0], nil
	})
	mux.HandleFunc("side_after_failure", func(ctx context.Context, task *consumer.Task) ([]byte, error) {
		return oneOnceFailed(ctx, (*m.e).store, task)
	})
	mux.HandleFunc("notify_each", func(ctx context.Context, task *consumer.Task) ([]byte, error) {
		in, err := workflow.DecodeInput(task.Payload)
		if err != nil {
			return nil, err
		}
		m.mu.Lock()
		wf := task.Headers.Get(workflow.HeaderWorkflow)
		m.notified[wf] = append(m.notified[wf], in)
		m.mu.Unlock()
		return nil, nil
	})
	return mux
}

// newRetryEnv is a workflow test environment whose worker runs retryMux's
// handlers with the given number of slots.
func newRetryEnv(t *testing.T, slots int) (*wfEnv, *retryMux) {
	rm := &retryMux{notified: map[string][]workflow.StepInput{}}
	var e *wfEnv
	rm.e = &e
	e = newWFEnv(t, rm.mux(), consumer.WithConcurrency(slots, slots))
	return e, rm
}

// waitStep waits until step name of workflow wf is terminal.
func (m *retryMux) waitStep(ctx context.Context, wf, name string) error {
	for {
		st, err := (*m.e).store.Status(ctx, wf)
		if err != nil {
			return err
		}
		for _, s := range st.Steps {
			if s.Name == name && s.State.Terminal() {
				return nil
			}
		}
		if err := waitTick(ctx); err != nil {
			return err
		}
	}
}

// waitFinal waits up to 30 seconds for workflow id to reach a final
// state and checks it is want, with finished_at set.
func waitFinal(t *testing.T, s *workflow.Store, id string, want workflow.State) workflow.Status {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	r, err := s.Wait(ctx, id)
	if err != nil {
		st, _ := s.Status(testCtx(t), id)
		t.Fatalf("workflow %s did not finish (%v): state %s, %d of %d steps done, finished_at %v, steps %+v",
			id, err, r.State, r.Done.Count(), r.Steps, r.FinishedAt, st.Steps)
	}
	st, err := s.Status(testCtx(t), id)
	if err != nil {
		t.Fatal(err)
	}
	if st.State != want || st.FinishedAt == nil {
		t.Fatalf("workflow %s ended %s (finished_at %v), want %s: %+v", id, st.State, st.FinishedAt, want, st)
	}
	return st
}

// Retrying a failed workflow ends in a final state in every combination of
// failure policy, on-failure step and number of retries: completed when the
// retried step now succeeds, failed when it fails again. The on-failure
// step runs once for each round that failed, with that round's failure;
// completed steps do not run again.
func TestWorkflowRetryCombinations(t *testing.T) {
	t.Parallel()
	e, rm := newRetryEnv(t, 48)
	var cases []retryCase
	for _, p := range []workflow.Policy{workflow.Stop, workflow.Continue} {
		for _, of := range []bool{false, true} {
			for _, n := range []int{1, 2} {
				for _, ok := range []bool{true, false} {
					cases = append(cases, retryCase{policy: p, onFailure: of, retries: n, succeeds: ok})
				}
			}
		}
	}
	for _, c := range cases {
		t.Run(c.name(), func(t *testing.T) {
			t.Parallel()
			id := strings.ReplaceAll(c.name(), "_", "-")
			if _, err := e.store.Submit(testCtx(t), retryDoc(id, c)); err != nil {
				t.Fatal(err)
			}
			st := waitFinal(t, e.store, id, workflow.Failed)
			wantLater := workflow.Cancelled
			if c.policy == workflow.Continue {
				wantLater = workflow.Completed
			}
			if got := stepOf(t, st, "later").State; got != wantLater {
				t.Fatalf("first round: later %s, want %s", got, wantLater)
			}
			for i := 1; i <= c.retries; i++ {
				if _, err := e.store.RetryFailed(testCtx(t), id); err != nil {
					t.Fatalf("retry %d: %v", i, err)
				}
				want := workflow.Failed
				if i == c.retries {
					want = c.final()
				}
				st = waitFinal(t, e.store, id, want)
			}
			checkRetried(t, e, rm, id, c, st)
		})
	}
}

// checkRetried checks each step of a retried workflow in its final state.
func checkRetried(t *testing.T, e *wfEnv, rm *retryMux, id string, c retryCase, st workflow.Status) {
	t.Helper()
	if st.Retries != c.retries {
		t.Errorf("retries %d, want %d", st.Retries, c.retries)
	}
	flaky := stepOf(t, st, "flaky")
	if flaky.Run != c.retries || flaky.State != map[bool]workflow.State{true: workflow.Completed, false: workflow.Failed}[c.succeeds] {
		t.Errorf("flaky %+v", flaky)
	}
	after := stepOf(t, st, "after_flaky")
	switch {
	case c.succeeds && (after.State != workflow.Completed || string(after.Task.Result) != "3"):
		t.Errorf("after_flaky %+v, want completed with 3", after)
	case !c.succeeds && after.State != workflow.Cancelled:
		t.Errorf("after_flaky %+v, want cancelled", after)
	}
	for _, name := range []string{"a", "side"} {
		if s := stepOf(t, st, name); s.State != workflow.Completed || s.Run != 0 || e.ran(s.TaskID) != 1 {
			t.Errorf("%s %+v ran %d times, want completed once", name, s, e.ran(s.TaskID))
		}
	}
	// later was cancelled under stop and ran again in the first retry.
	wantRun := map[workflow.Policy]int{workflow.Stop: 1, workflow.Continue: 0}[c.policy]
	if s := stepOf(t, st, "later"); s.State != workflow.Completed || s.Run != wantRun || e.ran(s.TaskID) != 1 {
		t.Errorf("later %+v ran %d times, want completed in run %d", s, e.ran(s.TaskID), wantRun)
	}
	if !c.onFailure {
		return
	}
	got := rm.notifications(id)
	if len(got) != c.failures() {
		t.Fatalf("on-failure step ran %d times, want once per failed round (%d)", len(got), c.failures())
	}
	for i, in := range got {
		want := workflow.StepTaskID(id, "flaky", i)
		if in.Failed == nil || in.Failed.TaskID != want || !strings.Contains(in.Failed.Error, fmt.Sprintf("run %d fails", i)) {
			t.Errorf("on-failure run %d got failure %+v, want task %s", i, in.Failed, want)
		}
	}
	notify := stepOf(t, st, "notify")
	wantState := workflow.Completed
	if c.succeeds {
		wantState = workflow.Pending // the last round did not fail
	}
	if notify.State != wantState || notify.Run != c.retries {
		t.Errorf("notify %+v, want %s in run %d", notify, wantState, c.retries)
	}
}

// A workflow left running with every step done and its on-failure step
// terminal, but the record not told (a crash between the two writes, or an
// on-failure step left terminal from an earlier round), is finished by a
// retry: it ends failed instead of waiting for good.
func TestWorkflowRetryFinishesAStuckOnFailure(t *testing.T) {
	t.Parallel()
	e, rm := newRetryEnv(t, 4)
	c := retryCase{policy: workflow.Continue, onFailure: true}
	id := e.submit(retryDoc("stuck", c))
	waitFinal(t, e.store, id, workflow.Failed)

	kv, err := e.js.KeyValue(testCtx(t), e.names.WorkflowsBucket())
	if err != nil {
		t.Fatal(err)
	}
	entry, err := kv.Get(testCtx(t), id+".wf")
	if err != nil {
		t.Fatal(err)
	}
	var rec map[string]any
	if err := json.Unmarshal(entry.Value(), &rec); err != nil {
		t.Fatal(err)
	}
	rec["state"], rec["on_failure_done"] = "running", false
	delete(rec, "finished_at")
	b, err := json.Marshal(rec)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Update(testCtx(t), id+".wf", b, entry.Revision()); err != nil {
		t.Fatal(err)
	}

	if _, err := e.store.RetryFailed(testCtx(t), id); err != nil {
		t.Fatal(err)
	}
	st := waitFinal(t, e.store, id, workflow.Failed)
	if st.Retries != 0 || len(rm.notifications(id)) != 1 {
		t.Errorf("retries %d, on-failure runs %d: the mend must not start a new round", st.Retries, len(rm.notifications(id)))
	}
}
