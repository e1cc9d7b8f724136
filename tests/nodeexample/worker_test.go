package nodeexample

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/spoolq/spool/producer"
	spool "github.com/spoolq/spool/shared"
	"github.com/spoolq/spool/streams"
	"github.com/spoolq/spool/streams/streamstest"
)

// nodeWorker is a running examples/node/worker.js.
type nodeWorker struct {
	cmd    *exec.Cmd
	logs   *streamstest.SyncBuffer
	killed bool
	done   chan struct{}
}

// startNodeWorker runs examples/node/worker.js serving the type patterns
// types (comma-separated) as name, with short retry delays and the
// processing state written as each attempt starts, and returns once it
// made or bound its consumers. It is interrupted when the test ends.
func startNodeWorker(t *testing.T, url, name, types string, env ...string) *nodeWorker {
	t.Helper()
	node, dir := nodeExample(t)
	cmd := exec.Command(node, filepath.Join(dir, "worker.js"))
	cmd.Env = append(append(os.Environ(), "NATS_URL="+url, "SPOOL_TYPES="+types, "SPOOL_WORKER_NAME="+name,
		"SPOOL_RETRY_BASE_MS=50", "SPOOL_RETRY_MAX_MS=200", "SPOOL_PROCESSING_DELAY_MS=0"), env...)
	w := &nodeWorker{cmd: cmd, logs: &streamstest.SyncBuffer{}, done: make(chan struct{})}
	cmd.Stderr = w.logs
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting the node worker: %v", err)
	}
	go func() {
		defer close(w.done)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			fmt.Fprintln(w.logs, sc.Text())
		}
	}()
	t.Cleanup(func() {
		if !w.killed {
			_ = cmd.Process.Signal(os.Interrupt)
			select {
			case <-w.done:
			case <-time.After(15 * time.Second):
				_ = cmd.Process.Kill()
				<-w.done
			}
			if err := cmd.Wait(); err != nil {
				t.Errorf("node worker %s exited with %v", name, err)
			}
		}
		t.Logf("node worker %s output:\n%s", name, w.logs.String())
	})
	w.waitLine(t, `"ready":true`)
	return w
}

// waitLine waits until the worker printed a line containing s.
func (w *nodeWorker) waitLine(t *testing.T, s string) {
	t.Helper()
	streamstest.WaitFor(t, 30*time.Second, func() error {
		if strings.Contains(w.logs.String(), s) {
			return nil
		}
		select {
		case <-w.done:
			t.Fatalf("the node worker exited before printing %s:\n%s", s, w.logs.String())
		default:
		}
		return fmt.Errorf("no line with %s yet", s)
	})
}

// kill ends the worker at once, as a crash would.
func (w *nodeWorker) kill(t *testing.T) {
	t.Helper()
	w.killed = true
	if err := w.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-w.done
	_ = w.cmd.Wait()
}

// enqueue enqueues a task and returns its id.
func enqueue(t *testing.T, ctx context.Context, c *producer.Client, task producer.Task) string {
	t.Helper()
	res, err := c.Enqueue(ctx, task)
	if err != nil {
		t.Fatalf("enqueue %s: %v", task.Type, err)
	}
	return res.ID
}

// wait waits for a task's terminal document and checks its state, the
// worker that wrote it and its attempts.
func wait(t *testing.T, ctx context.Context, c *producer.Client, id string, state spool.State, worker string, attempts int) spool.Result {
	t.Helper()
	wctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	res, err := c.Wait(wctx, id)
	if err != nil {
		t.Fatalf("waiting for %s: %v", id, err)
	}
	if res.State != state || res.Worker != worker || res.Attempts != attempts {
		t.Errorf("task %s: %s by %q after %d attempts, want %s by %q after %d (%+v)", id, res.State, res.Worker, res.Attempts, state, worker, attempts, res)
	}
	return res
}

// settled waits until the task stream holds no task of the type patterns'
// consumers: every task was acked or terminated.
func settled(t *testing.T, ctx context.Context, e *streamstest.Env, filter string) {
	t.Helper()
	s := e.Stream(t, "SPOOL_TASKS")
	streamstest.WaitFor(t, 30*time.Second, func() error {
		info, err := s.Info(ctx, jetstream.WithSubjectFilter(filter))
		if err != nil {
			return err
		}
		if len(info.State.Subjects) > 0 {
			return fmt.Errorf("tasks still in the stream: %v", info.State.Subjects)
		}
		return nil
	})
}

// countEvents counts the events on subject from now on.
func countEvents(t *testing.T, e *streamstest.Env, subject string) *atomic.Int32 {
	t.Helper()
	var n atomic.Int32
	sub, err := e.NC.Subscribe(subject, func(*nats.Msg) { n.Add(1) })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := e.NC.Flush(); err != nil {
		t.Fatal(err)
	}
	return &n
}

// TestNodeWorkerCore runs the Node worker as the only worker, pulling by
// type, through the core cases: completed, retried then completed, dead
// when deliveries run out, dead at once when the handler says so,
// cancelled while queued (by a client, and by a raw cancellation the
// worker must write the document for) and while running, unique keys
// released, and a crash of the Node process mid-task: the task is
// redelivered and completed once, by the next worker.
func TestNodeWorkerCore(t *testing.T) {
	e := streamstest.Start(t, streams.Settings{Consumers: streams.ConsumersByType, AckWait: 2 * time.Second, MaxDeliver: 3})
	ctx := longContext(t)
	c, err := producer.New(e.NC, producer.WithLogger(streamstest.Logger(t)))
	if err != nil {
		t.Fatal(err)
	}

	// Cancelled while queued, before any worker serves the type.
	byClient := enqueue(t, ctx, c, producer.Task{Type: "core.echo", Payload: []byte("never")})
	if _, err := c.Cancel(ctx, byClient); err != nil {
		t.Fatal(err)
	}
	raw := enqueue(t, ctx, c, producer.Task{Type: "core.echo", Payload: []byte("never")})
	cancelKV, err := e.JS.KeyValue(ctx, "spool_cancel")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cancelKV.Put(ctx, raw, []byte(`{"id":"`+raw+`","by":"test","reason":"raw","at":"2026-11-25T09:00:00Z"}`)); err != nil {
		t.Fatal(err)
	}

	node := startNodeWorker(t, e.URL, "node-1", "core.>")

	// The client wrote the first document itself; the raw canceller left
	// it to the worker, which meets the task on its first delivery.
	wait(t, ctx, c, byClient, spool.StateCancelled, "", 0)
	if res := wait(t, ctx, c, raw, spool.StateCancelled, "node-1", 1); res.CancelledBy != "test" || res.CancelReason != "raw" {
		t.Errorf("raw cancel: %+v", res)
	}
	settled(t, ctx, e, "spool.tasks.*.core.echo")
	for _, id := range []string{byClient, raw} {
		if strings.Contains(node.logs.String(), `"running":"`+id+`"`) {
			t.Errorf("cancelled task %s ran", id)
		}
	}

	t.Run("complete", func(t *testing.T) {
		id := enqueue(t, ctx, c, producer.Task{Type: "core.echo", Payload: []byte(`{"a": 1}`)})
		res := wait(t, ctx, c, id, spool.StateCompleted, "node-1", 1)
		if out, err := res.Output(); err != nil || string(out) != `{"a": 1}` || res.ResultEncoding != "" {
			t.Errorf("output %q (%q), %v", out, res.ResultEncoding, err)
		}
	})
	t.Run("retry then complete", func(t *testing.T) {
		id := enqueue(t, ctx, c, producer.Task{Type: "core.flaky"})
		res := wait(t, ctx, c, id, spool.StateCompleted, "node-1", 2)
		if out, _ := res.Output(); string(out) != `{"attempt":2,"by":"node"}` {
			t.Errorf("output %q", out)
		}
	})
	t.Run("dead after max deliveries", func(t *testing.T) {
		// No Spool-Max-Retries: the default 3 retries would make 4
		// attempts, but the consumer delivers a task 3 times at most.
		id := enqueue(t, ctx, c, producer.Task{Type: "core.error"})
		res := wait(t, ctx, c, id, spool.StateDead, "node-1", 3)
		if res.Reason != spool.ReasonError || res.Error != "failing attempt 3" {
			t.Errorf("dead: %+v", res)
		}
		checkDeadLetter(t, ctx, e, "core.error", id, "error", "3")
	})
	t.Run("do not retry", func(t *testing.T) {
		id := enqueue(t, ctx, c, producer.Task{Type: "core.fail", MaxRetries: new(5)})
		res := wait(t, ctx, c, id, spool.StateDead, "node-1", 1)
		if res.Reason != spool.ReasonPermanent || res.Error != "node refuses this task" {
			t.Errorf("dead: %+v", res)
		}
		checkDeadLetter(t, ctx, e, "core.fail", id, "permanent", "1")
	})
	t.Run("cancel while running", func(t *testing.T) {
		id := enqueue(t, ctx, c, producer.Task{Type: "core.sleep", Payload: []byte(`{"ms":60000}`)})
		node.waitLine(t, `"running":"`+id+`"`)
		if _, err := c.Cancel(ctx, id, producer.CancelBy("test")); err != nil {
			t.Fatal(err)
		}
		// The canceller writes the document over whatever it read, the
		// processing state or nothing yet: the worker's name may be in it
		// or not. The handler stops at once, the task leaves the stream,
		// and the document stays cancelled.
		if res, err := c.Wait(ctx, id); err != nil || res.State != spool.StateCancelled || res.CancelledBy != "test" {
			t.Fatalf("cancelled while running: %+v, %v", res, err)
		}
		settled(t, ctx, e, "spool.tasks.*.core.sleep")
		if res, err := c.Result(ctx, id); err != nil || res.State != spool.StateCancelled {
			t.Errorf("after the worker settled it: %+v, %v", res, err)
		}
	})
	t.Run("unique key released", func(t *testing.T) {
		task := producer.Task{Type: "core.sleep", Payload: []byte(`{"ms":300}`), UniqueKey: "invoice:42", UniqueTTL: time.Minute}
		id := enqueue(t, ctx, c, task)
		if _, err := c.Enqueue(ctx, task); !errors.Is(err, producer.ErrUniqueConflict) {
			t.Fatalf("a second task with the key while the first holds it: %v", err)
		}
		wait(t, ctx, c, id, spool.StateCompleted, "node-1", 1)
		// The key is released after the completed document is stored and
		// before the ack: once the task left the stream, it is free.
		settled(t, ctx, e, "spool.tasks.*.core.sleep")
		again := enqueue(t, ctx, c, task)
		wait(t, ctx, c, again, spool.StateCompleted, "node-1", 1)
	})
	t.Run("heartbeat", func(t *testing.T) {
		// Twice the ack wait: without its heartbeats the task would be
		// delivered again and run twice.
		id := enqueue(t, ctx, c, producer.Task{Type: "core.sleep", Payload: []byte(`{"ms":4000}`)})
		wait(t, ctx, c, id, spool.StateCompleted, "node-1", 1)
		if n := strings.Count(node.logs.String(), `"running":"`+id+`"`); n != 1 {
			t.Errorf("task %s ran %d times", id, n)
		}
	})
	t.Run("crash mid-task", func(t *testing.T) {
		id := enqueue(t, ctx, c, producer.Task{Type: "core.sleep", Payload: []byte(`{"ms":1500}`)})
		completed := countEvents(t, e, "spool.events.completed.*."+id+".>")
		node.waitLine(t, `"running":"`+id+`"`)
		node.kill(t)
		next := startNodeWorker(t, e.URL, "node-2", "core.>")
		wait(t, ctx, c, id, spool.StateCompleted, "node-2", 2)
		settled(t, ctx, e, "spool.tasks.*.core.>")
		if n := completed.Load(); n != 1 {
			t.Errorf("%d completed events, want 1", n)
		}
		if !strings.Contains(next.logs.String(), `"running":"`+id+`"`) {
			t.Errorf("node-2 did not run %s", id)
		}
	})
}

// checkDeadLetter checks the latest dead letter of a type at normal.
func checkDeadLetter(t *testing.T, ctx context.Context, e *streamstest.Env, typ, id, reason, attempts string) {
	t.Helper()
	m, err := e.Stream(t, "SPOOL_DLQ").GetLastMsgForSubject(ctx, "spool.dlq.normal."+typ)
	if err != nil {
		t.Fatal(err)
	}
	h := m.Header
	if h.Get(spool.HeaderTaskID) != id || h.Get(spool.HeaderReason) != reason || h.Get(spool.HeaderAttempts) != attempts ||
		h.Get(spool.HeaderOriginalSubject) != "spool.tasks.normal."+typ || h.Get("Nats-Msg-Id") == "" {
		t.Errorf("dead letter of %s: %v", id, h)
	}
}

// longContext lasts the few minutes a test with Node processes may take
// on a loaded machine.
func longContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// TestNodeWorkerByPriority runs the Node worker where workers pull by
// priority: it binds the five priority consumers, receives every type,
// runs the ones it has a handler for and dead-letters the others with
// no_handler.
func TestNodeWorkerByPriority(t *testing.T) {
	e := streamstest.Start(t, streams.Settings{Consumers: streams.ConsumersByPriority})
	ctx := longContext(t)
	c, err := producer.New(e.NC, producer.WithLogger(streamstest.Logger(t)))
	if err != nil {
		t.Fatal(err)
	}
	node := startNodeWorker(t, e.URL, "node-prio", "prio.*")
	node.waitLine(t, `"mode":"priority"`)
	high := spool.High
	served := enqueue(t, ctx, c, producer.Task{Type: "prio.echo", Payload: []byte("by priority"), Priority: &high})
	if res := wait(t, ctx, c, served, spool.StateCompleted, "node-prio", 1); res.ResultEncoding != spool.ResultEncodingText {
		t.Errorf("output of %s: %+v", served, res)
	}
	other := enqueue(t, ctx, c, producer.Task{Type: "other.echo"})
	if res := wait(t, ctx, c, other, spool.StateDead, "node-prio", 1); res.Reason != spool.ReasonNoHandler {
		t.Errorf("a type without a handler: %+v", res)
	}
	checkDeadLetter(t, ctx, e, "other.echo", other, "no_handler", "1")
}
