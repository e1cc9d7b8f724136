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
	return newWFEnvWith(t, streams.Settings{}, mux, opts...)
}

func newWFEnvWith(t *testing.T, s streams.Settings, mux *consumer.Mux, opts ...consumer.Option) *wfEnv {
	t.Helper()
	e := &wfEnv{env: newEnv(t, s), runs: map[string]int{}}
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

// Where workers pull by type, a worker that declares only its own types
// still serves workflow submissions, which every Go worker runs itself.
func TestWorkflowSubmitOverNATSByType(t *testing.T) {
	t.Parallel()
	e := newWFEnvWith(t, streams.Settings{Consumers: streams.ConsumersByType}, arithmetic(), consumer.WithTypes("add1"))
	msg := nats.NewMsg("spool.tasks.high." + workflow.SubmitType)
	msg.Data = []byte(`{"version":1,"steps":[{"name":"a","type":"add1","payload":1}]}`)
	msg.Header.Set(spool.HeaderTaskID, "by-type")
	if _, err := e.js.PublishMsg(testCtx(t), msg); err != nil {
		t.Fatal(err)
	}
	waitForWorkflow(t, e, "by-type")
	if a := stepOf(t, e.wait("by-type", workflow.Completed), "a"); string(a.Task.Result) != "2" {
		t.Errorf("a %+v", a)
	}
}

func waitForWorkflow(t *testing.T, e *wfEnv, id string) {
	t.Helper()
	streamstest.WaitFor(t, 10*time.Second, func() error {
		_, err := e.store.Get(testCtx(t), id)
		return err
	})
}
