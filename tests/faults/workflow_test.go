package faults_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/spoolq/spool/producer"
	"github.com/spoolq/spool/shared/workflow"
	"github.com/spoolq/spool/tests/checker"
)

// wfSteps is the 10-step DAG of TestWorkflowFaults: start, then seven
// branches after it, a fan-in after all seven (taking their results) and a
// last step after the fan-in.
func wfDoc(id string) workflow.Doc {
	d := workflow.Doc{ID: id, Steps: []workflow.Step{workflow.Task("start", "fault.step", nil)}}
	join := workflow.Task("join", "fault.step", nil)
	join.Inputs = true
	for i := range 7 {
		name := fmt.Sprintf("branch%d", i)
		s := workflow.Task(name, "fault.step", nil)
		s.After = []string{"start"}
		d.Steps = append(d.Steps, s)
		join.After = append(join.After, name)
	}
	last := workflow.Task("last", "fault.step", nil)
	last.After, last.Inputs = []string{"join"}, true
	d.Steps = append(d.Steps, join, last)
	return d
}

// TestWorkflowFaults runs 100 workflows of a 10-step DAG with a fan-in
// (1,000 under SPOOL_SOAK) through spool-faultworker processes while one is
// SIGKILLed every 300ms and replaced, and the server is restarted once.
// Every workflow must complete, every step's task must reach one terminal
// state (the checker: nothing lost, stuck or phantom, duplicates only from
// kills or the restart), no step may be stored twice (at most one
// execution of each step task on its first delivery), and each fan-in ran
// after all its inputs (the handler fails a step with a missing input).
func TestWorkflowFaults(t *testing.T) {
	const killEvery = 300 * time.Millisecond
	n := 100
	if soak() {
		n = 1000
	}
	start := time.Now()
	srv := startServer(t, t.TempDir(), 0, soak())
	nc := connect(t, srv.url, "faults-workflows")
	js := provision(t, nc, settings(1))
	chk := checker.New()
	chk.ExplainUnfaulted("result write or ack lost in a server restart")
	fl := newFleet(t, srv.url, chk, "SPOOL_CONCURRENCY=16")
	for range 3 {
		fl.start()
	}
	client, err := producer.New(nc, producer.WithTimeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(client.Close)
	ctx := ctxFor(t, time.Duration(scale(3))*time.Minute)

	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("wf%05d", i)
		for _, s := range wfDoc(ids[i]).Steps {
			id := workflow.StepTaskID(ids[i], s.Name, 0)
			chk.Enqueued(id, id)
		}
	}
	submitted := make(chan error, 1)
	go func() { submitted <- submitAll(ctx, client, ids) }()

	// Faults: a SIGKILL every killEvery, and one server restart, until
	// every workflow is submitted and finished.
	var finished sync.WaitGroup
	final := make([]workflow.Status, n)
	waitErrs := make([]error, n)
	allDone := make(chan struct{})
	restarted, restartedAt := false, time.Time{}
	const recovery = 3 * time.Second
	ticker := time.NewTicker(killEvery)
	defer ticker.Stop()
	submitting := true
loop:
	for {
		select {
		case err := <-submitted:
			if err != nil {
				t.Fatalf("submitting: %v", err)
			}
			submitting = false
			// One waiter, workflow after workflow: they all run at once
			// anyway, and one watch at a time is light.
			finished.Go(func() {
				for i, id := range ids {
					final[i], waitErrs[i] = client.WaitWorkflow(ctx, id)
				}
			})
			go func() { finished.Wait(); close(allDone) }()
			continue
		case <-allDone:
			break loop
		case <-ctx.Done():
			t.Fatalf("workflows not finished before the deadline (submitting: %v)", submitting)
		case <-ticker.C:
		}
		if !restarted && time.Since(start) > 2*time.Second {
			srv.stop()
			srv.start()
			restarted, restartedAt = true, time.Now()
			t.Logf("server restarted at %s", time.Since(start).Round(time.Millisecond))
			continue
		}
		if restarted && time.Since(restartedAt) < recovery {
			// A worker started while JetStream recovers its streams can
			// wait out its whole start-up timeout on a swallowed request:
			// no replacements until then.
			continue
		}
		running := fl.running()
		fl.kill(running[rand.IntN(len(running))])
		fl.start()
	}
	left := settle(t, ctx, js, time.Minute)
	fl.stopAll(30 * time.Second)
	collect(t, js, chk)
	lines, torn := fl.readLogs()
	t.Logf("%d execution lines, %d torn by SIGKILL; %d kills, restarted %v", lines, torn, fl.kills, restarted)
	r := report(t, "workflows (SIGKILL, restart)", fmt.Sprintf("%d SIGKILL, 1 restart", fl.kills), start, chk, left)
	if r.Completed != r.Tasks || r.Tasks != 10*n {
		t.Errorf("%d of %d step tasks completed, want %d", r.Completed, r.Tasks, 10*n)
	}

	for i, st := range final {
		if waitErrs[i] != nil {
			t.Errorf("workflow %s: %v", ids[i], waitErrs[i])
			continue
		}
		if st.State != workflow.Completed || st.Done != 10 {
			t.Errorf("workflow %s ended %s, %d steps done: %+v", ids[i], st.State, st.Done, st.Failure)
		}
		for _, s := range st.Steps {
			if s.State != workflow.Completed || s.Run != 0 {
				t.Errorf("workflow %s step %s: %s run %d", ids[i], s.Name, s.State, s.Run)
			}
			firsts := 0
			for _, e := range chk.Executions(s.TaskID) {
				if e.Attempt == 1 {
					firsts++
				}
			}
			if firsts > 1 {
				t.Errorf("step task %s ran %d times on a first delivery: it was stored twice", s.TaskID, firsts)
			}
		}
	}
	if fl.kills < 3 {
		t.Errorf("only %d kills during the run; the scenario proves little", fl.kills)
	}
}

// submitAll submits each workflow, retrying through the restart with the
// same id; a submission whose first try stored the workflow but lost the
// answer gets ErrExists, and RetryWorkflow then enqueues its ready steps
// (a no-op when they are queued already).
func submitAll(ctx context.Context, client *producer.Client, ids []string) error {
	for _, id := range ids {
		for {
			_, err := client.SubmitWorkflow(ctx, wfDoc(id))
			if errors.Is(err, workflow.ErrExists) {
				_, err = client.RetryWorkflow(ctx, id)
			}
			if err == nil || errors.Is(err, workflow.ErrNotFinished) { // finished already
				break
			}
			if ctx.Err() != nil {
				return fmt.Errorf("workflow %s: %w", id, err)
			}
			t := time.NewTimer(100 * time.Millisecond)
			select {
			case <-ctx.Done():
				t.Stop()
			case <-t.C:
			}
		}
	}
	return nil
}
