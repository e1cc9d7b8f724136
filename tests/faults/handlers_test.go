package faults_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/spoolq/spool/producer"
	spool "github.com/spoolq/spool/shared"
	"github.com/spoolq/spool/streams/streamstest"
	"github.com/spoolq/spool/tests/checker"
)

// TestSlowAndStuckHandlers runs handlers that outlive AckWait, with the
// worker's heartbeats (not redelivered) and without them (a worker process
// paused with SIGSTOP: redelivered to another worker, the duplicate
// counted), handlers past their deadline (honouring it or not), handlers
// that panic, and handlers that fail before they succeed. Each ends as it
// should, with exactly the executions it should take, and no worker dies.
func TestSlowAndStuckHandlers(t *testing.T) {
	start := time.Now()
	srv := startServer(t, t.TempDir(), 0, false)
	nc := connect(t, srv.url, "faults-handlers")
	js := provision(t, nc, settings(1))
	chk := checker.New()
	fl := newFleet(t, srv.url, chk, "SPOOL_CONCURRENCY=8")
	client, err := producer.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(client.Close)
	ctx := ctxFor(t, 2*time.Minute)
	kv, err := js.KeyValue(ctx, names.ResultsBucket())
	if err != nil {
		t.Fatal(err)
	}

	type want struct {
		state      spool.State
		reason     spool.Reason
		executions int
		attempts   int
	}
	cases := map[string]want{}
	enqueue := func(id string, p faultTask, w want, opts ...producer.EnqueueOption) {
		t.Helper()
		task, value := newTask(t, id, spool.High, p)
		if _, err := client.Enqueue(ctx, task, opts...); err != nil {
			t.Fatal(err)
		}
		chk.Enqueued(id, value)
		chk.ExpectExecutions(id, w.executions)
		cases[id] = w
	}

	// A handler stuck past AckWait without heartbeats: its worker process
	// is paused while it runs.
	a := fl.start()
	enqueue("paused", faultTask{SleepMS: 2 * int(ackWait/time.Millisecond)},
		want{state: spool.StateCompleted, executions: 1, attempts: 2})
	chk.ExpectExecutions("paused", 1) // the second run is the duplicate the pause causes
	streamstest.WaitFor(t, 30*time.Second, func() error {
		b, err := os.ReadFile(a.log)
		if err == nil && !bytes.Contains(b, []byte("paused ")) {
			err = errors.New("worker A has not started the task")
		}
		return err
	})
	fl.signal(a, syscall.SIGSTOP)
	chk.Faulted(a.pid, "worker paused (SIGSTOP) past AckWait")
	b := fl.start()
	var doc spool.Result
	streamstest.WaitFor(t, 30*time.Second, func() error {
		var err error
		doc, err = result(ctx, kv, "paused")
		if err == nil && (doc.State != spool.StateCompleted || doc.Worker != b.pid) {
			err = fmt.Errorf("paused task: state %s by worker %s, want completed by worker B %s", doc.State, doc.Worker, b.pid)
		}
		return err
	})
	fl.signal(a, syscall.SIGCONT)
	cases["paused"] = want{state: spool.StateCompleted, executions: 2, attempts: doc.Attempts}

	// The rest run on both workers.
	enqueue("slow-heartbeats", faultTask{SleepMS: 3 * int(ackWait/time.Millisecond)},
		want{state: spool.StateCompleted, executions: 1, attempts: 1})
	enqueue("deadline", faultTask{SleepMS: 10_000},
		want{state: spool.StateDead, reason: spool.ReasonTimeout, executions: 2, attempts: 2},
		producer.Timeout(300*time.Millisecond), producer.MaxRetries(1))
	enqueue("deadline-ignored", faultTask{SleepMS: 1500, IgnoreDeadline: true},
		want{state: spool.StateDead, reason: spool.ReasonTimeout, executions: 1, attempts: 1},
		producer.Timeout(200*time.Millisecond), producer.MaxRetries(0))
	enqueue("panic-once", faultTask{PanicAttempts: 1},
		want{state: spool.StateCompleted, executions: 2, attempts: 2})
	enqueue("panic-always", faultTask{PanicAttempts: 100},
		want{state: spool.StateDead, reason: spool.ReasonPanic, executions: 2, attempts: 2},
		producer.MaxRetries(1))
	enqueue("fail-twice", faultTask{FailAttempts: 2},
		want{state: spool.StateCompleted, executions: 3, attempts: 3})

	for id, w := range cases {
		streamstest.WaitFor(t, time.Minute, func() error {
			var err error
			doc, err = result(ctx, kv, id)
			if err == nil && !doc.State.Terminal() {
				err = fmt.Errorf("%s: state %s", id, doc.State)
			}
			return err
		})
		if doc.State != w.state || doc.Reason != w.reason || (id != "paused" && doc.Attempts != w.attempts) {
			t.Errorf("%s: %s (reason %q) after %d attempts, want %s (reason %q) after %d; error %q",
				id, doc.State, doc.Reason, doc.Attempts, w.state, w.reason, w.attempts, doc.Error)
		}
	}
	left := settle(t, ctx, js, time.Minute)
	fl.checkAlive()
	fl.stopAll(30 * time.Second)
	collect(t, js, chk)
	fl.readLogs()
	r := report(t, "slow and stuck handlers", "1 SIGSTOP, 3 deadlines, 3 panics", start, chk, left)
	if len(left) > 0 {
		t.Errorf("no server fault here, yet %d acknowledged tasks were left in the task stream", len(left))
	}
	if r.DuplicateExecutions != 1 {
		t.Errorf("%d duplicate executions, want 1 (the paused worker's task)", r.DuplicateExecutions)
	}
	total := 0
	for _, w := range cases {
		total += w.executions
	}
	if r.Executions != total {
		t.Errorf("%d executions, want %d", r.Executions, total)
	}
}

// result reads the result document of id.
func result(ctx context.Context, kv jetstream.KeyValue, id string) (spool.Result, error) {
	var doc spool.Result
	e, err := kv.Get(ctx, id)
	if err != nil {
		return doc, err
	}
	return doc, json.Unmarshal(e.Value(), &doc)
}
