package consumer_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/spoolq/spool/consumer"
	spool "github.com/spoolq/spool/shared"
	"github.com/spoolq/spool/shared/jsproto"
	"github.com/spoolq/spool/shared/workflow"
	"github.com/spoolq/spool/streams"
	"github.com/spoolq/spool/streams/streamstest"
)

// wfEnv is a server, a worker running the workflow test handlers and a
// workflow store.
type wfEnv struct {
	*env
	store *workflow.Store
	mu    sync.Mutex
	runs  map[string]int // task id → handler runs
}

func newWFEnv(t *testing.T, mux *consumer.Mux, opts ...consumer.Option) *wfEnv {
	t.Helper()
	e := &wfEnv{env: newEnv(t, streams.Settings{}), runs: map[string]int{}}
	var err error
	if e.store, err = workflow.Open(testCtx(t), e.js, e.names, testLogger(t)); err != nil {
		t.Fatal(err)
	}
	counted := consumer.HandlerFunc(func(ctx context.Context, task *consumer.Task) ([]byte, error) {
		e.mu.Lock()
		e.runs[task.ID]++
		e.mu.Unlock()
		return mux.ProcessTask(ctx, task)
	})
	e.worker(counted, opts...)
	return e
}

func (e *wfEnv) ran(taskID string) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.runs[taskID]
}

func (e *wfEnv) submit(doc workflow.Doc) string {
	e.t.Helper()
	id, err := e.store.Submit(testCtx(e.t), doc)
	if err != nil {
		e.t.Fatal(err)
	}
	return id
}

func (e *wfEnv) wait(id string, want workflow.State) workflow.Status {
	e.t.Helper()
	return e.waitFor(id, want, time.Minute)
}

func (e *wfEnv) waitFor(id string, want workflow.State, timeout time.Duration) workflow.Status {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(e.t.Context(), timeout)
	defer cancel()
	r, err := e.store.Wait(ctx, id)
	if err != nil {
		e.t.Fatalf("waiting for workflow %s: %v", id, err)
	}
	st, err := e.store.Status(testCtx(e.t), id)
	if err != nil {
		e.t.Fatal(err)
	}
	if r.State != want {
		e.t.Fatalf("workflow %s ended %s, want %s: %+v", id, r.State, want, st)
	}
	return st
}

func stepOf(t *testing.T, st workflow.Status, name string) workflow.StepStatus {
	t.Helper()
	for _, s := range st.Steps {
		if s.Name == name {
			return s
		}
	}
	t.Fatalf("no step %q in %+v", name, st)
	return workflow.StepStatus{}
}

// addOne returns its input plus one: the payload for a first step, the
// single input otherwise; sum adds all inputs.
func arithmetic() *consumer.Mux {
	mux := consumer.NewMux()
	mux.HandleFunc("add1", func(ctx context.Context, task *consumer.Task) ([]byte, error) {
		in := task.Payload
		if _, ok := task.Headers[workflow.HeaderWorkflow]; ok && json.Valid(in) && strings.HasPrefix(string(in), "{") {
			si, err := workflow.DecodeInput(in)
			if err != nil {
				return nil, err
			}
			in = si.Inputs[0]
		}
		n, err := strconv.Atoi(string(in))
		if err != nil {
			return nil, consumer.Permanent(err)
		}
		return []byte(strconv.Itoa(n + 1)), nil
	})
	mux.HandleFunc("sum", func(ctx context.Context, task *consumer.Task) ([]byte, error) {
		si, err := workflow.DecodeInput(task.Payload)
		if err != nil {
			return nil, err
		}
		var parts []string
		total := 0
		for _, in := range si.Inputs {
			n, err := strconv.Atoi(string(in))
			if err != nil {
				return nil, consumer.Permanent(fmt.Errorf("input %s: %w", in, err))
			}
			total += n
			parts = append(parts, string(in))
		}
		return json.Marshal(map[string]any{"total": total, "first": parts[0], "last": parts[len(parts)-1], "n": len(parts)})
	})
	mux.HandleFunc("fail", func(ctx context.Context, task *consumer.Task) ([]byte, error) {
		return nil, consumer.Permanent(errors.New("boom"))
	})
	return mux
}

// addChain is a chain of three add1 steps, a, b and c, from 1.
func addChain() workflow.Doc {
	var d workflow.Doc
	d.Chain(workflow.Task("a", "add1", []byte("1")), workflow.Task("b", "add1", nil), workflow.Task("c", "add1", nil))
	return d
}

// A chain passes each step's result to the next.
func TestWorkflowChain(t *testing.T) {
	t.Parallel()
	e := newWFEnv(t, arithmetic())
	id := e.submit(addChain())
	st := e.wait(id, workflow.Completed)
	c := stepOf(t, st, "c")
	if c.Task == nil || string(c.Task.Result) != "4" {
		t.Fatalf("step c: %+v", c)
	}
	for _, s := range st.Steps {
		if s.State != workflow.Completed || s.Task.Attempts != 1 || e.ran(s.TaskID) != 1 {
			t.Errorf("step %s: %+v, ran %d times", s.Name, s, e.ran(s.TaskID))
		}
	}
}

// A read of a workflow's steps that finds fewer records than the workflow
// has (what a KV watch placed on a replica still catching up after a
// restart returns, without an error) is never taken for the whole list: it
// is retried as jsproto.ErrBehind until the caller's deadline. Deleting a
// step record stands in for the lagging replica here.
func TestWorkflowStatusRefusesAShortStepList(t *testing.T) {
	t.Parallel()
	e := newWFEnv(t, arithmetic())
	id := e.submit(addChain())
	e.wait(id, workflow.Completed)
	kv, err := e.js.KeyValue(testCtx(t), e.names.WorkflowsBucket())
	if err != nil {
		t.Fatal(err)
	}
	if err := kv.Delete(testCtx(t), id+".step.b"); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Second)
	defer cancel()
	st, err := e.store.Status(ctx, id)
	if !errors.Is(err, jsproto.ErrBehind) {
		t.Fatalf("Status with a step record missing: %+v, error %v; want jsproto.ErrBehind", st, err)
	}
}

// A group's callback runs once, after every member, with their results in
// order.
func TestWorkflowGroupCallback(t *testing.T) {
	t.Parallel()
	n := 300
	if os.Getenv("SPOOL_SOAK") != "" {
		n = 10000
	}
	e := newWFEnv(t, arithmetic(), consumer.WithConcurrency(8, 64))
	members := make([]workflow.Step, n)
	for i := range members {
		members[i] = workflow.Task(fmt.Sprintf("m%05d", i), "add1", []byte(strconv.Itoa(i)))
	}
	var d workflow.Doc
	d.Group(members, workflow.Task("total", "sum", nil))
	start := time.Now()
	id := e.submit(d)
	st := e.waitFor(id, workflow.Completed, 10*time.Minute) // 10,000 under the race detector: minutes
	t.Logf("group of %d with a callback: %s", n, time.Since(start))
	cb := stepOf(t, st, "total")
	var got struct {
		Total       int
		First, Last string
		N           int
	}
	if err := json.Unmarshal(cb.Task.Result, &got); err != nil {
		t.Fatal(err)
	}
	if got.N != n || got.Total != n*(n+1)/2 || got.First != "1" || got.Last != strconv.Itoa(n) {
		t.Errorf("callback result %+v", got)
	}
	if r := e.ran(cb.TaskID); r != 1 {
		t.Errorf("callback ran %d times", r)
	}
}

// A DAG's fan-in runs once, after both branches; Finish called again for a
// finished step (a redelivery after a crash) changes nothing and enqueues
// nothing.
func TestWorkflowDAGFanInOnce(t *testing.T) {
	t.Parallel()
	e := newWFEnv(t, arithmetic())
	d := workflow.Doc{ID: "diamond"}
	d.Add(
		workflow.Task("a", "add1", []byte("1")),
		workflow.Step{Name: "b", Type: "add1", Priority: spool.High, After: []string{"a"}, Inputs: true},
		workflow.Step{Name: "c", Type: "add1", Priority: spool.Low, After: []string{"a"}, Inputs: true},
		workflow.Step{Name: "d", Type: "sum", Priority: spool.Normal, After: []string{"b", "c"}, Inputs: true},
	)
	id := e.submit(d)
	st := e.wait(id, workflow.Completed)
	dd := stepOf(t, st, "d")
	if !strings.Contains(string(dd.Task.Result), `"total":6`) || e.ran(dd.TaskID) != 1 {
		t.Fatalf("fan-in %+v ran %d times", dd, e.ran(dd.TaskID))
	}
	before, err := e.store.Get(testCtx(t), id)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"b", "c"} {
		ref := workflow.Ref{Workflow: id, Step: name, TaskID: workflow.StepTaskID(id, name, 0)}
		if err := e.store.Finish(testCtx(t), ref, workflow.Outcome{State: workflow.Completed}); err != nil {
			t.Fatal(err)
		}
	}
	after, err := e.store.Get(testCtx(t), id)
	if err != nil {
		t.Fatal(err)
	}
	b1, _ := json.Marshal(before)
	b2, _ := json.Marshal(after)
	if string(b1) != string(b2) {
		t.Errorf("a second Finish changed the record:\n%+v\n%+v", before, after)
	}
	if _, err := e.store.Submit(testCtx(t), d); !errors.Is(err, workflow.ErrExists) {
		t.Errorf("submitting the id again: %v, want ErrExists", err)
	}
	streamstestWaitEmpty(t, e.env)
	if r := e.ran(dd.TaskID); r != 1 {
		t.Errorf("fan-in ran %d times after a second Finish", r)
	}
}

func streamstestWaitEmpty(t *testing.T, e *env) {
	t.Helper()
	streamstest.WaitFor(t, 10*time.Second, func() error {
		if n := e.taskMsgs(); n != 0 {
			return fmt.Errorf("%d tasks left in the stream", n)
		}
		return nil
	})
}

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

// oneOnceFailed returns 1 once the workflow of task has recorded a failed
// step.
func oneOnceFailed(ctx context.Context, s *workflow.Store, task *consumer.Task) ([]byte, error) {
	wf := task.Headers.Get(workflow.HeaderWorkflow)
	for {
		r, err := s.Get(ctx, wf)
		if err != nil {
			return nil, err
		}
		if r.Failure != nil {
			return []byte("1"), nil
		}
		if err := waitTick(ctx); err != nil {
			return nil, err
		}
	}
}

// waitTick paces a handler that polls the workflow state (handlers have no
// signal to wait on); it ends with ctx.
func waitTick(ctx context.Context) error {
	t := time.NewTimer(20 * time.Millisecond)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
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

// Any NATS client submits the JSON document as a task of the reserved
// type; the workflow takes the task's id.
func TestWorkflowSubmitOverNATS(t *testing.T) {
	t.Parallel()
	e := newWFEnv(t, arithmetic())
	doc := `{"version":1,"steps":[{"name":"a","type":"add1","payload":41},{"name":"b","type":"add1","after":["a"],"inputs":true}]}`
	msg := nats.NewMsg("spool.tasks.normal." + workflow.SubmitType)
	msg.Data = []byte(doc)
	msg.Header.Set(spool.HeaderTaskID, "from-nats")
	if _, err := e.js.PublishMsg(testCtx(t), msg); err != nil {
		t.Fatal(err)
	}
	var st workflow.Status
	waitForWorkflow(t, e, "from-nats")
	st = e.wait("from-nats", workflow.Completed)
	if b := stepOf(t, st, "b"); string(b.Task.Result) != "43" {
		t.Errorf("b %+v", b)
	}
	// An invalid document is dead-lettered with its reason.
	bad := nats.NewMsg("spool.tasks.normal." + workflow.SubmitType)
	bad.Data = []byte(`{"steps":[{"name":"a","type":"add1","after":["a"]}]}`)
	bad.Header.Set(spool.HeaderTaskID, "bad-doc")
	if _, err := e.js.PublishMsg(testCtx(t), bad); err != nil {
		t.Fatal(err)
	}
	res := e.waitResult("bad-doc", spool.StateDead, 10*time.Second)
	if !strings.Contains(res.Error, "after names the step itself") {
		t.Errorf("dead submission error %q", res.Error)
	}
}

func waitForWorkflow(t *testing.T, e *wfEnv, id string) {
	t.Helper()
	streamstest.WaitFor(t, 10*time.Second, func() error {
		_, err := e.store.Get(testCtx(t), id)
		return err
	})
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
