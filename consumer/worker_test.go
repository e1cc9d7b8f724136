package consumer_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
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

// A task that ran out of deliveries without a verdict (its workers
// crashed) is left to the DLQ router: the worker's outstanding pulls let
// the server emit the MAX_DELIVERIES advisory, and the worker never runs
// the task.
func TestMaxDeliverAdvisoryWhileIdle(t *testing.T) {
	t.Parallel()
	e := newEnv(t, streams.Settings{Consumers: streams.ConsumersByPriority, AckWait: time.Second, MaxDeliver: 2})
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
	e := newEnv(t, streams.Settings{Consumers: streams.ConsumersByPriority})
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
