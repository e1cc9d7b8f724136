package consumer_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/spoolq/spool/consumer"
	"github.com/spoolq/spool/consumer/demo"
	spool "github.com/spoolq/spool/shared"
	"github.com/spoolq/spool/streams"
	"github.com/spoolq/spool/streams/streamstest"
)

// A task published by plain nats.go, without any Spool header, completes
// and its result (the echoed JSON payload) is stored under its stream
// sequence.
func TestPlainPublishCompletes(t *testing.T) {
	t.Parallel()
	e := newEnv(t, streams.Settings{})
	mux := consumer.NewMux()
	mux.HandleFunc("demo.echo", func(ctx context.Context, task *consumer.Task) ([]byte, error) {
		return task.Payload, nil
	})
	w := e.worker(mux)
	// Wait until the worker idles on long-polls, then publish.
	streamstest.WaitFor(t, 10*time.Second, func() error {
		if w.State() != consumer.WorkerIdle {
			return errors.New("worker idle")
		}
		return nil
	})
	ack, err := e.js.Publish(testCtx(t), "spool.tasks.normal.demo.echo", []byte(`{"hello":"world"}`))
	if err != nil {
		t.Fatal(err)
	}
	doc := e.waitResult(fmt.Sprint(ack.Sequence), spool.StateCompleted, 10*time.Second)
	if string(doc.Result) != `{"hello":"world"}` {
		t.Errorf("result %s, want the payload", doc.Result)
	}
	if doc.Type != "demo.echo" || doc.Priority != spool.Normal || doc.Attempts != 1 || doc.Worker != "test-worker" ||
		doc.StartedAt == nil || doc.FinishedAt == nil || doc.EnqueuedAt.IsZero() {
		t.Errorf("result document %+v", doc)
	}
	streamstest.WaitFor(t, 5*time.Second, func() error {
		if e.taskMsgs() != 0 {
			return errors.New("task removed")
		}
		return nil
	})
	st := w.Stats()
	if c := st.Priorities[spool.Normal]; c.Completed != 1 || c.Processed != 1 || c.Pickup.Count != 1 || c.Run.Count != 1 {
		t.Errorf("normal counters %+v", c.Counters)
	}
	if c := st.Types["demo.echo"]; c.Completed != 1 {
		t.Errorf("type counters %+v", c)
	}
}

// Strict mode serves every critical task before any high one, and so on.
func TestStrictPriorityOrder(t *testing.T) {
	t.Parallel()
	e := newEnv(t, streams.Settings{})
	const perPriority = 15
	for _, p := range []spool.Priority{spool.Idle, spool.Low, spool.Normal, spool.High, spool.Critical} {
		e.publishMany(p, "work", perPriority, nil)
	}
	var order log[spool.Priority]
	mux := consumer.NewMux()
	mux.HandleFunc("work", func(ctx context.Context, task *consumer.Task) ([]byte, error) {
		order.add(task.Priority)
		return nil, nil
	})
	e.worker(mux, consumer.WithStrict(true), consumer.WithConcurrency(1, 1))
	streamstest.WaitFor(t, 30*time.Second, func() error {
		if order.len() != 5*perPriority {
			return errors.New("all tasks")
		}
		return nil
	})
	got := order.snapshot()
	for i := 1; i < len(got); i++ {
		if got[i] < got[i-1] {
			t.Fatalf("task %d is %s after %s: order %v", i, got[i], got[i-1], got)
		}
	}
}

// Under saturation every priority's share of the tasks started matches its
// weight share within 2 percentage points.
func TestWeightedShares(t *testing.T) {
	t.Parallel()
	e := newEnv(t, streams.Settings{})
	const perPriority = 400
	const window = 480 // all priorities stay non-empty: critical needs 200 of its 400
	for _, p := range spool.Priorities {
		e.publishMany(p, "work", perPriority, nil)
	}
	var order log[spool.Priority]
	mux := consumer.NewMux()
	mux.HandleFunc("work", func(ctx context.Context, task *consumer.Task) ([]byte, error) {
		order.add(task.Priority)
		return nil, nil
	})
	e.worker(mux, consumer.WithConcurrency(4, 4), consumer.WithBoost())
	streamstest.WaitFor(t, 30*time.Second, func() error {
		if order.len() < window {
			return errors.New("window")
		}
		return nil
	})
	wantShares(t, order.snapshot()[:window], 0.02)
}

// wantShares checks that every priority's share of the tasks started in
// order is its share of the default weights within tol.
func wantShares(t *testing.T, order []spool.Priority, tol float64) {
	t.Helper()
	var counts [5]int
	for _, p := range order {
		counts[p]++
	}
	weights := consumer.DefaultWeights() // the tests leave the weights alone
	var sum float64
	for _, v := range weights {
		sum += v
	}
	for _, p := range spool.Priorities {
		share := float64(counts[p]) / float64(len(order))
		want := weights[p] / sum
		t.Logf("%-8s share %.3f want %.3f", p, share, want)
		if d := share - want; d > tol || d < -tol {
			t.Errorf("%s share %.3f, want %.3f ± %.2f", p, share, want, tol)
		}
	}
}

// The boost lets an old idle task through a flood of critical tasks: with
// idle weighted 1/10000 of critical it would wait for ~10000 critical
// tasks; aged past the boost step (×10000) it runs within a few.
func TestBoostLetsIdleThrough(t *testing.T) {
	t.Parallel()
	e := newEnv(t, streams.Settings{})
	idleSeq := e.publish(spool.Idle, "flood", nil, nil)
	e.publishMany(spool.Critical, "flood", 300, nil)
	tasks, err := e.js.Stream(testCtx(t), e.names.TaskStream())
	if err != nil {
		t.Fatal(err)
	}
	idleMsg, err := tasks.GetMsg(testCtx(t), idleSeq)
	if err != nil {
		t.Fatal(err)
	}
	// A frozen clock at which the idle task is exactly one minute old and
	// every critical task (published after it) is younger.
	frozen := idleMsg.Time.Add(time.Minute)
	clock := func() time.Time { return frozen }

	gate := make(chan struct{})
	var first atomic.Bool
	var order log[spool.Priority]
	mux := consumer.NewMux()
	mux.HandleFunc("flood", func(ctx context.Context, task *consumer.Task) ([]byte, error) {
		if first.CompareAndSwap(false, true) {
			<-gate // hold the only slot while the idle task ages
		}
		order.add(task.Priority)
		return nil, nil
	})
	weights := consumer.DefaultWeights()
	weights[spool.Idle] = 0.0001
	w := e.worker(mux, consumer.WithConcurrency(1, 1), consumer.WithWeights(weights),
		consumer.WithBoost(consumer.BoostStep{After: time.Minute, Factor: 10000}), consumer.WithClock(clock))

	streamstest.WaitFor(t, 10*time.Second, func() error {
		if w.Stats().Busy != 1 {
			return errors.New("first task running")
		}
		return nil
	})
	streamstest.WaitFor(t, 10*time.Second, func() error {
		s := w.Stats()
		if !(s.Priorities[spool.Idle].Boost == 10000 && s.Priorities[spool.Critical].Boost == 1 && s.Priorities[spool.Critical].Backlog > 0) {
			return errors.New("idle boost seen")
		}
		return nil
	})
	close(gate)
	streamstest.WaitFor(t, 30*time.Second, func() error {
		for _, p := range order.snapshot() {
			if p == spool.Idle {
				return nil
			}
		}
		return errors.New("idle task done")
	})
	wantBoosted(t, order.snapshot())
}

// wantBoosted checks that the idle task in order ran after at most 3
// critical tasks.
func wantBoosted(t *testing.T, order []spool.Priority) {
	t.Helper()
	before := 0
	for _, p := range order {
		if p == spool.Idle {
			break
		}
		before++
	}
	t.Logf("idle task ran after %d critical tasks", before)
	if before > 3 {
		t.Errorf("idle task ran after %d critical tasks, want at most 3 once boosted", before)
	}
}

// Retry delays follow min(base·2^(attempt-1), max) + up to 20% jitter: the
// server never redelivers before the delay, and the retrying document
// names the next attempt time.
func TestRetryBackoff(t *testing.T) {
	t.Parallel()
	e := newEnv(t, streams.Settings{})
	base, maxDelay := 50*time.Millisecond, 150*time.Millisecond
	var starts log[time.Time]
	writes := e.resultWrites("retry-1")
	mux := consumer.NewMux()
	mux.HandleFunc("flaky", func(ctx context.Context, task *consumer.Task) ([]byte, error) {
		starts.add(time.Now())
		if task.Attempt <= 3 {
			return nil, fmt.Errorf("failure %d", task.Attempt)
		}
		return []byte(`"ok"`), nil
	})
	// Processing written as every attempt starts (the default waits 1s).
	e.worker(mux, consumer.WithRetry(base, maxDelay, 5), consumer.WithProcessingDelay(0))
	e.publishID(spool.High, "flaky", "retry-1", nil, nil)
	doc := e.waitResult("retry-1", spool.StateCompleted, 20*time.Second)
	if doc.Attempts != 4 || string(doc.Result) != `"ok"` {
		t.Fatalf("result %+v", doc)
	}
	s := starts.snapshot()
	if len(s) != 4 {
		t.Fatalf("%d attempts, want 4", len(s))
	}
	for k := 1; k < len(s); k++ {
		want := consumer.Backoff(base, maxDelay, k)
		gap := s[k].Sub(s[k-1])
		t.Logf("after attempt %d: gap %s, backoff %s", k, gap, want)
		if gap < want {
			t.Errorf("attempt %d came %s after attempt %d, before its backoff %s", k+1, gap, k, want)
		}
	}
	// The document went processing → retrying (×3, with the error and the
	// next attempt time) → processing → completed.
	docs := nextWrites(t, writes, 8)
	var states []string
	for _, d := range docs {
		states = append(states, fmt.Sprintf("%s/%d", d.State, d.Attempts))
		if d.State == spool.StateRetrying {
			if d.NextAttempt == nil || !strings.Contains(d.Error, "failure") {
				t.Errorf("retrying document %+v", d)
			} else if ahead := d.NextAttempt.Sub(*d.StartedAt); ahead < consumer.Backoff(base, maxDelay, d.Attempts) {
				t.Errorf("next attempt %s after the start of attempt %d, before its backoff", ahead, d.Attempts)
			}
		}
	}
	want := "processing/1 retrying/1 processing/2 retrying/2 processing/3 retrying/3 processing/4 completed/4"
	if got := strings.Join(states, " "); got != want {
		t.Errorf("document states %s, want %s", got, want)
	}
}

// Tasks waiting in backoff hold no slot: fresh tasks of the same priority
// run while they wait.
func TestBackoffDoesNotBlockFresh(t *testing.T) {
	t.Parallel()
	e := newEnv(t, streams.Settings{})
	mux := consumer.NewMux()
	mux.HandleFunc("fail", func(ctx context.Context, task *consumer.Task) ([]byte, error) {
		return nil, errors.New("not yet")
	})
	mux.HandleFunc("ok", func(ctx context.Context, task *consumer.Task) ([]byte, error) {
		return nil, nil
	})
	w := e.worker(mux, consumer.WithConcurrency(2, 2), consumer.WithRetry(time.Hour, time.Hour, 3))
	for i := range 20 {
		e.publishID(spool.Normal, "fail", "fail-"+itoa(i), nil, nil)
	}
	streamstest.WaitFor(t, 20*time.Second, func() error {
		if w.Stats().Priorities[spool.Normal].Retried != 20 {
			return errors.New("failing tasks in backoff")
		}
		return nil
	})
	for i := range 20 {
		e.publishID(spool.Normal, "ok", "ok-"+itoa(i), nil, nil)
	}
	for i := range 20 {
		e.waitResult("ok-"+itoa(i), spool.StateCompleted, 20*time.Second)
	}
	// Results are stored before the ack: wait for the acks to land.
	streamstest.WaitFor(t, 10*time.Second, func() error {
		if e.consumerInfo(spool.Normal).NumAckPending != 20 {
			return errors.New("only the 20 tasks in backoff ack-pending")
		}
		return nil
	})
	doc, _ := e.result("fail-0")
	if doc.State != spool.StateRetrying || doc.NextAttempt == nil || time.Until(*doc.NextAttempt) < 50*time.Minute {
		t.Errorf("backoff document %+v", doc)
	}
}

// A handler that runs longer than AckWait heartbeats and is never
// redelivered; one that overruns its Spool-Timeout fails with reason
// timeout; a panic is a failed attempt and the worker lives on.
func TestTimeoutHeartbeatPanic(t *testing.T) {
	t.Parallel()
	e := newEnv(t, streams.Settings{AckWait: time.Second})
	var longRuns, panics atomic.Int32
	mux := consumer.NewMux()
	mux.HandleFunc("long", func(ctx context.Context, task *consumer.Task) ([]byte, error) {
		longRuns.Add(1)
		select { // the task's own work: 3× AckWait
		case <-time.After(3 * time.Second):
			return []byte(`"done"`), nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	})
	mux.HandleFunc("slow", func(ctx context.Context, task *consumer.Task) ([]byte, error) {
		<-ctx.Done()
		return nil, ctx.Err()
	})
	mux.HandleFunc("panicky", func(ctx context.Context, task *consumer.Task) ([]byte, error) {
		if task.Attempt == 1 {
			panics.Add(1)
			panic("boom")
		}
		return []byte(`"recovered"`), nil
	})
	// The long task's writes: with the default ProcessingDelay (1s, past
	// the first heartbeats at AckWait/3) its processing state is written
	// from the heartbeat's timer.
	writes := e.resultWrites("long-1")
	w := e.worker(mux, consumer.WithConcurrency(3, 3), consumer.WithRetry(20*time.Millisecond, 20*time.Millisecond, 3))
	e.publishID(spool.Normal, "long", "long-1", nil, nil)
	e.publishID(spool.Normal, "slow", "slow-1", nil, map[string]string{spool.HeaderTimeout: "100ms", spool.HeaderMaxRetries: "1"})
	e.publishID(spool.Normal, "panicky", "panic-1", nil, nil)

	doc := e.waitResult("long-1", spool.StateCompleted, 20*time.Second)
	if doc.Attempts != 1 || longRuns.Load() != 1 {
		t.Errorf("long task: %d runs, document %+v: heartbeats did not hold it", longRuns.Load(), doc)
	}
	var states []spool.State
	for _, d := range nextWrites(t, writes, 2) {
		states = append(states, d.State)
	}
	if !slices.Equal(states, []spool.State{spool.StateProcessing, spool.StateCompleted}) {
		t.Errorf("long task writes %v, want processing then completed", states)
	}
	doc = e.waitResult("slow-1", spool.StateDead, 20*time.Second)
	if doc.Reason != spool.ReasonTimeout || doc.Attempts != 2 || !strings.Contains(doc.Error, "timed out") {
		t.Errorf("slow task document %+v", doc)
	}
	doc = e.waitResult("panic-1", spool.StateCompleted, 20*time.Second)
	if doc.Attempts != 2 || panics.Load() != 1 {
		t.Errorf("panicky task document %+v", doc)
	}
	if c := w.Stats().Types["panicky"]; c.Failed != 1 || c.Retried != 1 || c.Completed != 1 {
		t.Errorf("panicky counters %+v", c)
	}
	streamstest.WaitFor(t, 10*time.Second, func() error {
		if !(e.consumerInfo(spool.Normal).NumAckPending == 0 && e.taskMsgs() == 0) {
			return errors.New("every task settled")
		}
		return nil
	})
}

// Dead letters from the worker carry the documented headers, the original
// is removed, and the dead result names the reason.
func TestDeadLetterInProcess(t *testing.T) {
	t.Parallel()
	e := newEnv(t, streams.Settings{})
	mux := consumer.NewMux()
	mux.HandleFunc("fail", func(ctx context.Context, task *consumer.Task) ([]byte, error) {
		return nil, errors.New("always fails")
	})
	mux.HandleFunc("perm", func(ctx context.Context, task *consumer.Task) ([]byte, error) {
		return nil, consumer.Permanent(errors.New("card declined"))
	})
	mux.HandleFunc("boom", func(ctx context.Context, task *consumer.Task) ([]byte, error) {
		panic("kaboom")
	})
	e.worker(mux, consumer.WithRetry(10*time.Millisecond, 10*time.Millisecond, 1))
	dlq, err := e.js.Stream(testCtx(t), e.names.DLQStream())
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, typ, id string
		hdr           map[string]string
		wantReason    spool.Reason
		wantAttempts  int
		wantErr       string
	}{
		{"last attempt fails", "fail", "d-fail", nil, spool.ReasonError, 2, "always fails"},
		{"permanent", "perm", "d-perm", nil, spool.ReasonPermanent, 1, "card declined"},
		{"panic on the last attempt", "boom", "d-boom", map[string]string{spool.HeaderMaxRetries: "0"}, spool.ReasonPanic, 1, "kaboom"},
		{"no handler", "nobody.home", "d-none", nil, spool.ReasonNoHandler, 1, "no handler"},
		{"bad header", "fail", "d-bad", map[string]string{spool.HeaderTimeout: "soon"}, spool.ReasonBadInput, 1, "Spool-Timeout"},
		{"bad id", "fail", "bad id!", nil, spool.ReasonBadInput, 1, "invalid task id"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			hdr := map[string]string{"X-Tenant": "acme", spool.HeaderTraceParent: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}
			for k, v := range tc.hdr {
				hdr[k] = v
			}
			seq := e.publishID(spool.High, tc.typ, tc.id, []byte("payload"), hdr)
			subject := "spool.dlq.high." + tc.typ
			var got *jetstream.RawStreamMsg
			streamstest.WaitFor(t, 20*time.Second, func() error {
				m, err := dlq.GetLastMsgForSubject(testCtx(t), subject)
				if err != nil || m.Header.Get(spool.HeaderOriginalSeq) != fmt.Sprint(seq) {
					return errors.New("dead letter on " + subject)
				}
				got = m
				return nil
			})
			h := got.Header
			checks := map[string]string{
				spool.HeaderReason:          string(tc.wantReason),
				spool.HeaderAttempts:        fmt.Sprint(tc.wantAttempts),
				spool.HeaderOriginalSubject: "spool.tasks.high." + tc.typ,
				spool.HeaderOriginalSeq:     fmt.Sprint(seq),
				spool.HeaderMsgID:           fmt.Sprintf("dlq-SPOOL_TASKS-%d", seq),
				spool.HeaderTaskID:          tc.id,
				"X-Tenant":                  "acme",
				spool.HeaderTraceParent:     hdr[spool.HeaderTraceParent],
			}
			for k, want := range checks {
				if v := h.Get(k); v != want {
					t.Errorf("header %s = %q, want %q", k, v, want)
				}
			}
			if !strings.Contains(h.Get(spool.HeaderError), tc.wantErr) {
				t.Errorf("Spool-Error %q does not mention %q", h.Get(spool.HeaderError), tc.wantErr)
			}
			if _, err := time.Parse(time.RFC3339Nano, h.Get(spool.HeaderFailedAt)); err != nil {
				t.Errorf("Spool-Failed-At: %v", err)
			}
			// A direct get adds Nats-Stream/-Sequence/-Subject/-Time-Stamp
			// of the DLQ copy itself: they must name the DLQ, not the task.
			if h.Get("Nats-Stream") != e.names.DLQStream() || h.Get("Nats-Subject") != subject {
				t.Errorf("dead letter carries the task's internal headers: %v", h)
			}
			if string(got.Data) != "payload" {
				t.Errorf("payload %q", got.Data)
			}
			key := tc.id
			if spool.ValidateID(key) != nil {
				key = fmt.Sprint(seq)
			}
			doc := e.waitResult(key, spool.StateDead, 10*time.Second)
			if doc.Reason != tc.wantReason || doc.Attempts != tc.wantAttempts {
				t.Errorf("dead document %+v", doc)
			}
			tasks, err := e.js.Stream(testCtx(t), e.names.TaskStream())
			if err != nil {
				t.Fatal(err)
			}
			streamstest.WaitFor(t, 10*time.Second, func() error {
				_, err := tasks.GetMsg(testCtx(t), seq)
				if !errors.Is(err, jetstream.ErrMsgNotFound) {
					return errors.New("original removed")
				}
				return nil
			})
		})
	}
}

// A completed or dead task releases its unique key, but not a key that a
// newer task holds.
func TestUniqueKeyReleased(t *testing.T) {
	t.Parallel()
	e := newEnv(t, streams.Settings{})
	mux := consumer.NewMux()
	mux.HandleFunc("ok", func(ctx context.Context, task *consumer.Task) ([]byte, error) { return nil, nil })
	mux.HandleFunc("perm", func(ctx context.Context, task *consumer.Task) ([]byte, error) {
		return nil, consumer.Permanent(errors.New("no"))
	})
	e.worker(mux)
	kv, err := e.js.KeyValue(testCtx(t), e.names.UniqueBucket())
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, typ, id, key, holder string
		state                      spool.State
		wantKept                   bool
	}{
		{"completed releases", "ok", "u-1", "report:2026-11", "u-1", spool.StateCompleted, false},
		{"dead releases", "perm", "u-2", "report:2026-12", "u-2", spool.StateDead, false},
		{"held by another task", "ok", "u-3", "report:2027-01", "u-other", spool.StateCompleted, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := kv.Create(testCtx(t), spool.UniqueKVKey(tc.key), []byte(tc.holder), jetstream.KeyTTL(time.Hour)); err != nil {
				t.Fatal(err)
			}
			e.publishID(spool.Normal, tc.typ, tc.id, nil, map[string]string{
				spool.HeaderUniqueKey: tc.key, spool.HeaderUniqueTTL: "1h",
			})
			e.waitResult(tc.id, tc.state, 10*time.Second)
			// The key is released before the task is removed.
			streamstest.WaitFor(t, 10*time.Second, func() error {
				if e.taskMsgs() != 0 {
					return errors.New("task removed")
				}
				return nil
			})
			entry, err := kv.Get(testCtx(t), spool.UniqueKVKey(tc.key))
			switch {
			case tc.wantKept && (err != nil || string(entry.Value()) != tc.holder):
				t.Errorf("key of another task: %v, %v", entry, err)
			case !tc.wantKept && !errors.Is(err, jetstream.ErrKeyNotFound):
				t.Errorf("key not released: %v", err)
			}
		})
	}
}

// Graceful stop: running handlers get the shutdown timeout, then are
// cancelled and their tasks handed back at once; nothing is lost and a
// second worker finishes every task well before AckWait would have
// returned them.
func TestGracefulStopHandsBack(t *testing.T) {
	t.Parallel()
	e := newEnv(t, streams.Settings{AckWait: time.Minute})
	const n = 30
	for i := range n {
		e.publishID(spool.Normal, "job", "job-"+itoa(i), nil, nil)
	}
	running := make(chan string, n)
	mux1 := consumer.NewMux()
	mux1.HandleFunc("job", func(ctx context.Context, task *consumer.Task) ([]byte, error) {
		running <- task.ID
		<-ctx.Done() // never finishes on its own
		return nil, ctx.Err()
	})
	w1, err := consumer.New(e.connect(), mux1, consumer.WithLogger(testLogger(t)), consumer.WithConcurrency(3, 3),
		consumer.WithShutdownTimeout(100*time.Millisecond), consumer.WithPolling(100*time.Millisecond, 50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	if err := w1.Start(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		<-running
	}
	if err := w1.Stop(testCtx(t)); err != nil {
		t.Fatalf("stop: %v", err)
	}
	select {
	case <-w1.Stopped():
	default:
		t.Fatal("Stopped not closed after Stop returned")
	}
	if err := w1.Stop(testCtx(t)); err != nil {
		t.Fatalf("second stop: %v", err)
	}
	if err := w1.Start(testCtx(t)); !errors.Is(err, consumer.ErrStopped) {
		t.Fatalf("start after stop: %v", err)
	}
	st := w1.Stats()
	if got := st.Total().Returned; got != 3 || st.State != consumer.WorkerStopped || st.Total().Completed != 0 {
		t.Fatalf("after stop: returned %d, state %s, completed %d", got, st.State, st.Total().Completed)
	}
	pending := 0
	for i := range n {
		if doc, ok := e.result("job-" + itoa(i)); ok {
			if doc.State != spool.StatePending {
				t.Errorf("handed-back task %s in state %s", doc.ID, doc.State)
			}
			pending++
		}
	}
	if pending != 3 {
		t.Errorf("%d result documents after stop, want the 3 handed back", pending)
	}

	mux2 := consumer.NewMux()
	mux2.HandleFunc("job", func(ctx context.Context, task *consumer.Task) ([]byte, error) { return nil, nil })
	e.worker(mux2, consumer.WithConcurrency(4, 4))
	for i := range n {
		e.waitResult("job-"+itoa(i), spool.StateCompleted, 20*time.Second) // AckWait is 1m
	}
	streamstest.WaitFor(t, 10*time.Second, func() error {
		if e.taskMsgs() != 0 {
			return errors.New("queue empty")
		}
		return nil
	})
}

// Stop lets running handlers finish within the shutdown timeout.
func TestGracefulStopFinishes(t *testing.T) {
	t.Parallel()
	e := newEnv(t, streams.Settings{})
	started := make(chan struct{})
	release := make(chan struct{})
	mux := consumer.NewMux()
	mux.HandleFunc("job", func(ctx context.Context, task *consumer.Task) ([]byte, error) {
		close(started)
		<-release
		return []byte(`"finished"`), ctx.Err()
	})
	w, err := consumer.New(e.connect(), mux, consumer.WithLogger(testLogger(t)), consumer.WithShutdownTimeout(time.Minute),
		consumer.WithPolling(100*time.Millisecond, 50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Stop(testCtx(t)); err != nil { // before Start: a no-op that stops it
		t.Fatal(err)
	}
	if err := w.Start(testCtx(t)); !errors.Is(err, consumer.ErrStopped) {
		t.Fatalf("start after stop: %v", err)
	}
	w, err = consumer.New(e.connect(), mux, consumer.WithLogger(testLogger(t)), consumer.WithShutdownTimeout(time.Minute),
		consumer.WithPolling(100*time.Millisecond, 50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	if err := w.Start(testCtx(t)); err != nil {
		t.Fatalf("second start: %v", err)
	}
	e.publishID(spool.Low, "job", "fin-1", nil, nil)
	<-started
	if s := w.State(); s != consumer.WorkerBusy {
		t.Errorf("state %s while a handler runs", s)
	}
	stopErr := make(chan error, 1)
	go func() { stopErr <- w.Stop(testCtx(t)) }()
	streamstest.WaitFor(t, 10*time.Second, func() error {
		if w.State() != consumer.WorkerStopping {
			return errors.New("stopping")
		}
		return nil
	})
	close(release)
	if err := <-stopErr; err != nil {
		t.Fatal(err)
	}
	doc := e.waitResult("fin-1", spool.StateCompleted, 10*time.Second)
	if string(doc.Result) != `"finished"` {
		t.Errorf("result %s", doc.Result)
	}
}

// The pool grows to its maximum under a backlog and shrinks back to its
// minimum after an idle period, without touching running tasks.
func TestAutoscale(t *testing.T) {
	t.Parallel()
	e := newEnv(t, streams.Settings{})
	gate := make(chan struct{})
	var done atomic.Int32
	mux := consumer.NewMux()
	mux.HandleFunc("job", func(ctx context.Context, task *consumer.Task) ([]byte, error) {
		<-gate
		done.Add(1)
		return nil, nil
	})
	w := e.worker(mux, consumer.WithConcurrency(1, 4), consumer.WithAutoscale(0.6, 300*time.Millisecond))
	if s := w.Stats(); s.Slots != 1 {
		t.Fatalf("starts with %d slots, want the minimum 1", s.Slots)
	}
	e.publishMany(spool.Normal, "job", 20, nil)
	streamstest.WaitFor(t, 20*time.Second, func() error {
		s := w.Stats()
		if !(s.Slots == 4 && s.Busy == 4) {
			return errors.New("scaled up to 4 busy slots")
		}
		return nil
	})
	close(gate)
	streamstest.WaitFor(t, 20*time.Second, func() error {
		if done.Load() != 20 {
			return errors.New("all done")
		}
		return nil
	})
	streamstest.WaitFor(t, 20*time.Second, func() error {
		if w.Stats().Slots != 1 {
			return errors.New("scaled down to 1 slot")
		}
		return nil
	})
	s := w.Stats()
	if s.ScaleUps == 0 || s.ScaleDowns == 0 || s.Total().Completed != 20 {
		t.Errorf("stats %+v", s)
	}
	t.Log(s.Summary())
}

func TestNewValidates(t *testing.T) {
	t.Parallel()
	nc := &nats.Conn{}
	mux := consumer.NewMux()
	tests := []struct {
		name    string
		opts    []consumer.Option
		wantErr bool
	}{
		{"defaults", nil, false},
		{"concurrency", []consumer.Option{consumer.WithConcurrency(2, 1)}, true},
		{"zero min", []consumer.Option{consumer.WithConcurrency(0, 1)}, true},
		{"weights", []consumer.Option{consumer.WithWeights(consumer.Weights{1, 0, 1, 1, 1})}, true},
		{"boost order", []consumer.Option{consumer.WithBoost(consumer.BoostStep{time.Minute, 2}, consumer.BoostStep{time.Second, 3})}, true},
		{"boost factor", []consumer.Option{consumer.WithBoost(consumer.BoostStep{time.Minute, 0.5})}, true},
		{"retry", []consumer.Option{consumer.WithRetry(time.Minute, time.Second, 3)}, true},
		{"retries", []consumer.Option{consumer.WithRetry(time.Second, time.Minute, -1)}, true},
		{"jitter", []consumer.Option{consumer.WithRetryJitter(2)}, true},
		{"timeout", []consumer.Option{consumer.WithTaskTimeout(0)}, true},
		{"shutdown", []consumer.Option{consumer.WithShutdownTimeout(-time.Second)}, true},
		{"polling", []consumer.Option{consumer.WithPolling(time.Millisecond, time.Second)}, true},
		{"autoscale", []consumer.Option{consumer.WithAutoscale(1.5, time.Minute)}, true},
		{"names", []consumer.Option{consumer.WithNames(spool.Names{})}, true},
		{"valid set", []consumer.Option{consumer.WithConcurrency(2, 8), consumer.WithStrict(true), consumer.WithRetry(time.Second, time.Minute, 0)}, false},
		{"nil logger: the default", []consumer.Option{consumer.WithLogger(nil)}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := consumer.New(nc, mux, tc.opts...)
			if (err != nil) != tc.wantErr {
				t.Fatalf("err %v, wantErr %v", err, tc.wantErr)
			}
			if err != nil && !errors.Is(err, consumer.ErrInvalidOption) {
				t.Errorf("error %v does not wrap ErrInvalidOption", err)
			}
		})
	}
}

// The demo handlers of spool-consumer --demo.
func TestDemoHandlers(t *testing.T) {
	t.Parallel()
	e := newEnv(t, streams.Settings{})
	mux := consumer.NewMux()
	demo.Register(mux)
	e.worker(mux, consumer.WithRetry(10*time.Millisecond, 10*time.Millisecond, 3))
	tests := []struct {
		typ, id, payload string
		state            spool.State
		want             string
		attempts         int
	}{
		{demo.Echo, "echo-1", `{"a":1}`, spool.StateCompleted, `{"a":1}`, 1},
		{demo.Echo, "echo-2", `plain text`, spool.StateCompleted, `"plain text"`, 1}, // text, with result_encoding "text"
		{demo.Sleep, "sleep-1", `{"ms":20}`, spool.StateCompleted, `{"slept_ms":20}`, 1},
		{demo.Fail, "fail-1", `{"fail_times":2}`, spool.StateCompleted, `{"attempts":3}`, 3},
		{demo.Fail, "fail-2", `{"fail_times":9}`, spool.StateDead, ``, 4},
		{demo.Sleep, "sleep-bad", `{"ms":"x"}`, spool.StateDead, ``, 1},
	}
	for _, tc := range tests {
		e.publishID(spool.Normal, tc.typ, tc.id, []byte(tc.payload), nil)
	}
	for _, tc := range tests {
		doc := e.waitResult(tc.id, tc.state, 20*time.Second)
		if string(doc.Result) != tc.want || doc.Attempts != tc.attempts {
			t.Errorf("%s: result %s after %d attempts, want %s after %d", tc.id, doc.Result, doc.Attempts, tc.want, tc.attempts)
		}
	}
}

// With a processing delay, an attempt that runs longer than the delay
// still shows "processing", and its final state always wins.
func TestProcessingDelay(t *testing.T) {
	t.Parallel()
	e := newEnv(t, streams.Settings{})
	release := make(chan struct{})
	mux := consumer.NewMux()
	mux.HandleFunc("slow", func(ctx context.Context, task *consumer.Task) ([]byte, error) {
		<-release
		return []byte(`"slow"`), nil
	})
	mux.HandleFunc("fast", func(ctx context.Context, task *consumer.Task) ([]byte, error) {
		return []byte(`"fast"`), nil
	})
	e.worker(mux, consumer.WithProcessingDelay(50*time.Millisecond))
	for i := range 50 {
		e.publishID(spool.High, "fast", "fast-"+itoa(i), nil, nil)
	}
	e.publishID(spool.High, "slow", "slow-1", nil, nil)
	doc := e.waitResult("slow-1", spool.StateProcessing, 10*time.Second)
	if doc.StartedAt == nil || doc.Attempts != 1 {
		t.Errorf("processing document %+v", doc)
	}
	close(release)
	e.waitResult("slow-1", spool.StateCompleted, 10*time.Second)
	for i := range 50 {
		e.waitResult("fast-"+itoa(i), spool.StateCompleted, 10*time.Second)
	}
}

// A task that ran out of deliveries without a verdict (its workers
// crashed) is left to the DLQ router: the worker's outstanding pulls let
// the server emit the MAX_DELIVERIES advisory, and the worker never runs
// the task.
func TestMaxDeliverAdvisoryWhileIdle(t *testing.T) {
	t.Parallel()
	e := newEnv(t, streams.Settings{AckWait: time.Second, MaxDeliver: 2})
	seq := e.publishID(spool.Low, "job", "crashy", nil, nil)
	// Two deliveries to a "worker" that crashes: fetched, never acked.
	cons, err := e.js.Consumer(testCtx(t), e.names.TaskStream(), e.names.Consumer(spool.Low))
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 2; i++ {
		m, err := cons.Next(jetstream.FetchMaxWait(5 * time.Second))
		if err != nil {
			t.Fatalf("delivery %d: %v", i, err)
		}
		if md, _ := m.Metadata(); md.NumDelivered != uint64(i) {
			t.Fatalf("delivery %d has NumDelivered %d", i, md.NumDelivered)
		}
	}
	var ran atomic.Int32
	mux := consumer.NewMux()
	mux.HandleFunc("job", func(ctx context.Context, task *consumer.Task) ([]byte, error) {
		ran.Add(1)
		return nil, nil
	})
	e.worker(mux)
	adv, err := e.js.Stream(testCtx(t), e.names.AdvisoryStream())
	if err != nil {
		t.Fatal(err)
	}
	streamstest.WaitFor(t, 15*time.Second, func() error {
		m, err := adv.GetLastMsgForSubject(testCtx(t), "$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.SPOOL_TASKS.spool-low")
		if err != nil {
			return errors.New("MAX_DELIVERIES advisory")
		}
		var a struct {
			StreamSeq uint64 `json:"stream_seq"`
		}
		if !(json.Unmarshal(m.Data, &a) == nil && a.StreamSeq == seq) {
			return errors.New("MAX_DELIVERIES advisory")
		}
		return nil
	})
	if ran.Load() != 0 {
		t.Errorf("the worker ran a task past MaxDeliver %d times", ran.Load())
	}
}

// A handler that ignores its deadline does not hold its task: the attempt
// is settled (here: dead, reason timeout) while the handler still runs, and
// the slot stays busy until it returns.
func TestHandlerIgnoringDeadline(t *testing.T) {
	t.Parallel()
	e := newEnv(t, streams.Settings{})
	release := make(chan struct{})
	mux := consumer.NewMux()
	mux.HandleFunc("stubborn", func(ctx context.Context, task *consumer.Task) ([]byte, error) {
		<-release // ignores ctx
		return []byte(`"late"`), nil
	})
	w := e.worker(mux, consumer.WithConcurrency(1, 1))
	e.publishID(spool.Normal, "stubborn", "stubborn-1", nil, map[string]string{spool.HeaderTimeout: "50ms", spool.HeaderMaxRetries: "0"})
	doc := e.waitResult("stubborn-1", spool.StateDead, 10*time.Second)
	if doc.Reason != spool.ReasonTimeout {
		t.Errorf("dead document %+v", doc)
	}
	if s := w.Stats(); s.Busy != 1 {
		t.Errorf("%d busy slots while the stubborn handler runs, want 1", s.Busy)
	}
	close(release)
	streamstest.WaitFor(t, 10*time.Second, func() error {
		if w.Stats().Busy != 0 {
			return errors.New("slot freed")
		}
		return nil
	})
	if doc, _ := e.result("stubborn-1"); doc.State != spool.StateDead {
		t.Errorf("the late return overwrote the dead document: %+v", doc)
	}
}

// The delivery guarantees hold on a replicated (R3) topology on a 3-node
// cluster: completion with results, retries, dead letters, and a graceful
// hand-back picked up by a second worker.
func TestWorkerOnCluster(t *testing.T) {
	t.Parallel()
	e := newClusterEnv(t, streams.Settings{})
	mux := consumer.NewMux()
	demo.Register(mux)
	w1 := e.worker(mux, consumer.WithRetry(20*time.Millisecond, 20*time.Millisecond, 1))
	const n = 40
	for i := range n {
		e.publishID(spool.Priorities[i%5], demo.Echo, "c-"+itoa(i), []byte(`{"i":`+itoa(i)+`}`), nil)
	}
	e.publishID(spool.High, demo.Fail, "c-retry", []byte(`{"fail_times":1}`), nil)
	e.publishID(spool.High, demo.Fail, "c-dead", []byte(`{"fail_times":5}`), nil)
	for i := range n {
		doc := e.waitResult("c-"+itoa(i), spool.StateCompleted, 30*time.Second)
		if string(doc.Result) != `{"i":`+itoa(i)+`}` {
			t.Errorf("c-%d result %s", i, doc.Result)
		}
	}
	if doc := e.waitResult("c-retry", spool.StateCompleted, 30*time.Second); doc.Attempts != 2 {
		t.Errorf("retried task %+v", doc)
	}
	if doc := e.waitResult("c-dead", spool.StateDead, 30*time.Second); doc.Reason != spool.ReasonError || doc.Attempts != 2 {
		t.Errorf("dead task %+v", doc)
	}
	if err := w1.Stop(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	// Tasks published while no worker runs wait; a new worker takes them.
	e.publishID(spool.Low, demo.Echo, "c-late", []byte(`"late"`), nil)
	e.worker(mux)
	e.waitResult("c-late", spool.StateCompleted, 30*time.Second)
	streamstest.WaitFor(t, 10*time.Second, func() error {
		if e.taskMsgs() != 0 {
			return errors.New("queue empty")
		}
		return nil
	})
}

// A pull that fails (here: the priority's consumer is gone, so the
// request finds no responder) rests the priority instead of retrying in a
// loop, and pulling resumes once the consumer is back.
func TestPullFailureRestsAndRecovers(t *testing.T) {
	t.Parallel()
	e := newEnv(t, streams.Settings{})
	var logs streamstest.SyncBuffer
	mux := consumer.NewMux()
	mux.HandleFunc("job", func(ctx context.Context, task *consumer.Task) ([]byte, error) {
		return []byte(`"done"`), nil
	})
	e.worker(mux, consumer.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
	e.publishID(spool.Low, "job", "before", nil, nil)
	e.waitResult("before", spool.StateCompleted, 10*time.Second)

	if err := e.js.DeleteConsumer(testCtx(t), e.names.TaskStream(), e.names.Consumer(spool.Low)); err != nil {
		t.Fatal(err)
	}
	streamstest.WaitFor(t, 10*time.Second, func() error {
		if !strings.Contains(logs.String(), "pull failed") {
			return errors.New("a failed pull logged")
		}
		return nil
	})
	// Let a few rest periods pass: the failures come one per rest, not in a
	// loop.
	since := time.Now()
	streamstest.WaitFor(t, 10*time.Second, func() error {
		if strings.Count(logs.String(), "pull failed") < 3 {
			return errors.New("three failed pulls")
		}
		return nil
	})
	failures := strings.Count(logs.String(), "pull failed")
	if perSecond := float64(failures) / time.Since(since).Seconds(); failures > 3 && perSecond > 20 {
		t.Errorf("%d failed pulls in %s: pulling is not resting", failures, time.Since(since))
	}

	if err := streams.Provision(testCtx(t), e.js, e.topo, testLogger(t)); err != nil {
		t.Fatal(err)
	}
	e.publishID(spool.Low, "job", "after", nil, nil)
	e.waitResult("after", spool.StateCompleted, 10*time.Second)
}
