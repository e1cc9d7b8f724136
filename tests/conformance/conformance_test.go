package conformance_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/spoolq/spool/consumer"
	"github.com/spoolq/spool/consumer/dlqrouter"
	"github.com/spoolq/spool/producer"
	spool "github.com/spoolq/spool/shared"
	"github.com/spoolq/spool/streams"
	"github.com/spoolq/spool/streams/streamstest"
)

// setup is one server setup the suite runs against: how to start its
// server(s), and the topology settings every behaviour provisions.
type setup struct {
	name     string
	settings streams.Settings
	start    func(t *testing.T, s streams.Settings) *streamstest.Env
}

func single(t *testing.T, s streams.Settings) *streamstest.Env { return streamstest.Start(t, s) }

func cluster(t *testing.T, s streams.Settings) *streamstest.Env {
	return streamstest.StartCluster(t, 3, s)
}

// setups are the supported setups: file and memory storage on one server,
// and file storage replicated three times on a 3-node cluster.
var setups = []setup{
	{"file", streams.Settings{Storage: "file"}, single},
	{"memory", streams.Settings{Storage: "memory"}, single},
	{"cluster-r3", streams.Settings{Storage: "file", Replicas: 3}, cluster},
}

// behaviour is one core behaviour, run on a stack of its own. tune, when
// set, adjusts the setup's topology settings for it.
type behaviour struct {
	name string
	run  func(t *testing.T, s *stack)
	tune func(*streams.Settings)
}

var behaviours = []behaviour{
	{"completes", testCompletes, nil},
	{"retries-then-completes", testRetriesThenCompletes, nil},
	{"exhausted-retries-dead-letter", testExhaustedRetries, nil},
	{"permanent-dead-letters-at-once", testPermanent, nil},
	{"crashes-exhaust-deliveries-router-dead-letters", testMaxDeliver, func(s *streams.Settings) {
		s.AckWait, s.MaxDeliver = time.Second, 2
	}},
	{"delayed-runs-no-earlier", testDelayed, nil},
	{"unique-key-refuses-second", testUnique, nil},
	{"priorities-both-served", testPriorities, nil},
	{"graceful-stop-hands-back", testGracefulStop, nil},
}

func TestConformance(t *testing.T) {
	t.Parallel()
	for _, su := range setups {
		t.Run(su.name, func(t *testing.T) {
			t.Parallel()
			env := su.start(t, su.settings)
			for i, b := range behaviours {
				t.Run(b.name, func(t *testing.T) {
					t.Parallel()
					settings := su.settings
					if b.tune != nil {
						b.tune(&settings)
					}
					b.run(t, newStack(t, env, settings, "c"+strconv.Itoa(i)))
				})
			}
		})
	}
}

// stack is the topology of one behaviour, under its own prefix on the
// setup's server, and a producer client for it.
type stack struct {
	t      *testing.T
	env    *streamstest.Env
	names  spool.Names
	client *producer.Client
}

func newStack(t *testing.T, env *streamstest.Env, settings streams.Settings, prefix string) *stack {
	t.Helper()
	names, err := spool.NewNames(prefix)
	if err != nil {
		t.Fatal(err)
	}
	topo, err := streams.New(names, settings)
	if err != nil {
		t.Fatal(err)
	}
	if err := streams.Provision(streamstest.Context(t), env.JS, topo, streamstest.Logger(t)); err != nil {
		t.Fatalf("provisioning %s: %v", prefix, err)
	}
	// The setup is what it claims: storage and replicas as configured.
	cfg := env.Stream(t, names.TaskStream()).CachedInfo().Config
	if cfg.Storage != topo.TaskStreamConfig().Storage || cfg.Replicas != topo.Settings.Replicas {
		t.Fatalf("task stream has %s storage and %d replicas, want %s and %d",
			cfg.Storage, cfg.Replicas, topo.TaskStreamConfig().Storage, topo.Settings.Replicas)
	}
	client, err := producer.New(env.Connect(t), producer.WithNames(names), producer.WithLogger(streamstest.Logger(t)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(client.Close)
	return &stack{t: t, env: env, names: names, client: client}
}

// worker starts a worker for this stack on its own connection, stopped when
// the test ends unless the test stopped it. Retries back off 20ms.
func (s *stack) worker(h consumer.Handler, opts ...consumer.Option) *consumer.Worker {
	s.t.Helper()
	base := []consumer.Option{
		consumer.WithNames(s.names),
		consumer.WithLogger(streamstest.Logger(s.t)),
		consumer.WithWorkerName("conformance"),
		consumer.WithPolling(100*time.Millisecond, 50*time.Millisecond),
		consumer.WithRetry(20*time.Millisecond, 20*time.Millisecond, spool.DefaultMaxRetries),
	}
	w, err := consumer.New(s.env.Connect(s.t), h, append(base, opts...)...)
	if err != nil {
		s.t.Fatal(err)
	}
	s.start("worker", w.Start, w.Stop)
	return w
}

// start starts a long-running part and stops it (checking the error) when
// the test ends, unless the test stopped it first.
func (s *stack) start(what string, start, stop func(context.Context) error) {
	s.t.Helper()
	if err := start(streamstest.Context(s.t)); err != nil {
		s.t.Fatalf("starting the %s: %v", what, err)
	}
	s.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(s.t.Context()), streamstest.Timeout)
		defer cancel()
		if err := stop(ctx); err != nil {
			s.t.Errorf("stopping the %s: %v", what, err)
		}
	})
}

// router starts the DLQ router of this stack, stopped when the test ends.
func (s *stack) router() {
	s.t.Helper()
	r, err := dlqrouter.New(s.env.Connect(s.t), dlqrouter.WithNames(s.names), dlqrouter.WithLogger(streamstest.Logger(s.t)))
	if err != nil {
		s.t.Fatal(err)
	}
	s.start("router", r.Start, r.Stop)
}

func (s *stack) enqueue(task producer.Task, opts ...producer.EnqueueOption) producer.EnqueueResult {
	s.t.Helper()
	res, err := s.client.Enqueue(streamstest.Context(s.t), task, opts...)
	if err != nil {
		s.t.Fatalf("enqueue %s: %v", task.Type, err)
	}
	return res
}

// wait waits for task id to reach a terminal state and checks it is want.
func (s *stack) wait(id string, want spool.State) spool.Result {
	s.t.Helper()
	r, err := s.client.Wait(streamstest.Context(s.t), id)
	if err != nil {
		s.t.Fatalf("waiting for task %s: %v", id, err)
	}
	if r.State != want {
		s.t.Fatalf("task %s ended %s (reason %q, error %q), want %s", id, r.State, r.Reason, r.Error, want)
	}
	return r
}

// deadLetter returns the dead letter of a task of typ at priority p.
func (s *stack) deadLetter(p spool.Priority, typ string) *jetstream.RawStreamMsg {
	s.t.Helper()
	subject, err := s.names.DLQSubject(p, typ)
	if err != nil {
		s.t.Fatal(err)
	}
	dlq := s.env.Stream(s.t, s.names.DLQStream())
	// The dead letter is stored before the task's result says dead, but on
	// a cluster the read may be answered by a replica that has not stored
	// it yet (direct get): read again while it is not found.
	var m *jetstream.RawStreamMsg
	streamstest.WaitFor(s.t, 10*time.Second, func() error {
		var err error
		m, err = dlq.GetLastMsgForSubject(streamstest.Context(s.t), subject)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return fmt.Errorf("dead letter on %s: %w", subject, err)
		}
		if err != nil {
			s.t.Fatalf("dead letter on %s: %v", subject, err)
		}
		return nil
	})
	return m
}

// waitEmpty waits until the task stream holds no message: every task was
// acked or removed.
func (s *stack) waitEmpty() {
	s.t.Helper()
	tasks := s.env.Stream(s.t, s.names.TaskStream())
	streamstest.WaitFor(s.t, 10*time.Second, func() error {
		info, err := tasks.Info(streamstest.Context(s.t))
		if err != nil {
			return err
		}
		if n := info.State.Msgs; n != 0 {
			return fmt.Errorf("%d tasks left in the stream", n)
		}
		return nil
	})
}

// A task completes and its result is readable.
func testCompletes(t *testing.T, s *stack) {
	mux := consumer.NewMux()
	mux.HandleFunc("report.build", func(ctx context.Context, task *consumer.Task) ([]byte, error) {
		return []byte(`{"pages":` + string(task.Payload) + `}`), nil
	})
	s.worker(mux)
	res := s.enqueue(producer.NewTask("report.build", []byte("12")), producer.AtPriority(spool.High))
	r := s.wait(res.ID, spool.StateCompleted)
	if r.Type != "report.build" || r.Priority != spool.High || r.Attempts != 1 || string(r.Result) != `{"pages":12}` {
		t.Errorf("result %+v", r)
	}
	if r.StartedAt == nil || r.FinishedAt == nil || r.Worker != "conformance" || r.EnqueuedAt.IsZero() {
		t.Errorf("result times or worker missing: %+v", r)
	}
	read, err := s.client.Result(streamstest.Context(t), res.ID)
	if err != nil || read.State != spool.StateCompleted || string(read.Result) != `{"pages":12}` {
		t.Errorf("Result = %+v, %v", read, err)
	}
	s.waitEmpty()
}

// A failing task is retried and completes when an attempt succeeds.
func testRetriesThenCompletes(t *testing.T, s *stack) {
	mux := consumer.NewMux()
	mux.HandleFunc("flaky", func(ctx context.Context, task *consumer.Task) ([]byte, error) {
		if task.Attempt < 3 {
			return nil, errors.New("not yet")
		}
		return []byte("done"), nil
	})
	s.worker(mux)
	res := s.enqueue(producer.NewTask("flaky", nil))
	r := s.wait(res.ID, spool.StateCompleted)
	if out, err := r.Output(); r.Attempts != 3 || err != nil || string(out) != "done" {
		t.Errorf("result %+v, want 3 attempts and \"done\"", r)
	}
}

// A task that exhausts its retries lands in the DLQ with reason error and
// its result is dead.
func testExhaustedRetries(t *testing.T, s *stack) {
	s.router()
	mux := consumer.NewMux()
	mux.HandleFunc("always.fails", func(ctx context.Context, task *consumer.Task) ([]byte, error) {
		return nil, errors.New("smtp 451")
	})
	s.worker(mux)
	res := s.enqueue(producer.NewTask("always.fails", []byte("body")), producer.MaxRetries(2))
	r := s.wait(res.ID, spool.StateDead)
	if r.Reason != spool.ReasonError || r.Attempts != 3 || r.Error != "smtp 451" {
		t.Errorf("dead result %+v, want reason error after 3 attempts", r)
	}
	m := s.deadLetter(spool.Normal, "always.fails")
	h := m.Header
	if h.Get(spool.HeaderReason) != string(spool.ReasonError) || h.Get(spool.HeaderAttempts) != "3" ||
		h.Get(spool.HeaderTaskID) != res.ID || h.Get(spool.HeaderError) != "smtp 451" {
		t.Errorf("dead-letter headers %v", h)
	}
	if want, _ := s.names.TaskSubject(spool.Normal, "always.fails"); h.Get(spool.HeaderOriginalSubject) != want {
		t.Errorf("%s = %q, want %q", spool.HeaderOriginalSubject, h.Get(spool.HeaderOriginalSubject), want)
	}
	if string(m.Data) != "body" {
		t.Errorf("dead-letter payload %q", m.Data)
	}
}

// A Permanent error dead-letters the task at its first attempt, whatever
// its retries.
func testPermanent(t *testing.T, s *stack) {
	s.router()
	mux := consumer.NewMux()
	mux.HandleFunc("card.charge", func(ctx context.Context, task *consumer.Task) ([]byte, error) {
		return nil, consumer.Permanent(errors.New("card declined"))
	})
	s.worker(mux)
	res := s.enqueue(producer.NewTask("card.charge", nil), producer.MaxRetries(5), producer.AtPriority(spool.Critical))
	r := s.wait(res.ID, spool.StateDead)
	if r.Reason != spool.ReasonPermanent || r.Attempts != 1 {
		t.Errorf("dead result %+v, want reason permanent after 1 attempt", r)
	}
	h := s.deadLetter(spool.Critical, "card.charge").Header
	if h.Get(spool.HeaderReason) != string(spool.ReasonPermanent) || h.Get(spool.HeaderAttempts) != "1" {
		t.Errorf("dead-letter headers %v", h)
	}
}

// crashing runs a "worker" on cons that pulls and never settles, keeping a
// pull outstanding so the server emits the max-deliveries advisory, until
// the returned stop is called.
func crashing(t *testing.T, cons jetstream.Consumer) (stop func()) {
	ctx, cancel := context.WithCancel(t.Context())
	crashed := make(chan struct{})
	go func() {
		defer close(crashed)
		for ctx.Err() == nil {
			fctx, fcancel := context.WithTimeout(ctx, 500*time.Millisecond)
			if b, err := cons.Fetch(1, jetstream.FetchContext(fctx)); err == nil {
				for range b.Messages() { // received, never acked
				}
			}
			fcancel()
		}
	}()
	return func() { cancel(); <-crashed }
}

// A task whose worker crashes at every delivery (never settles it) runs out
// of deliveries; the DLQ router moves it to the DLQ with reason
// max_deliver and its result is dead.
func testMaxDeliver(t *testing.T, s *stack) {
	s.router()
	res := s.enqueue(producer.NewTask("crashes.worker", []byte("body")), producer.MaxRetries(5))
	cons, err := s.env.JS.Consumer(streamstest.Context(t), s.names.TaskStream(), s.names.Consumer(spool.Normal))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(crashing(t, cons))
	r := s.wait(res.ID, spool.StateDead)
	if r.Reason != spool.ReasonMaxDeliver || r.Attempts != 2 {
		t.Errorf("dead result %+v, want reason max_deliver after 2 deliveries", r)
	}
	m := s.deadLetter(spool.Normal, "crashes.worker")
	if h := m.Header; h.Get(spool.HeaderReason) != string(spool.ReasonMaxDeliver) || h.Get(spool.HeaderAttempts) != "2" ||
		h.Get(spool.HeaderTaskID) != res.ID || string(m.Data) != "body" {
		t.Errorf("dead letter %v %q", h, m.Data)
	}
	s.waitEmpty()
}

// A delayed task is reported scheduled, and runs no earlier than its time.
func testDelayed(t *testing.T, s *stack) {
	ran := make(chan time.Time, 1)
	mux := consumer.NewMux()
	mux.HandleFunc("reminder", func(ctx context.Context, task *consumer.Task) ([]byte, error) {
		ran <- time.Now()
		return nil, nil
	})
	s.worker(mux)
	res := s.enqueue(producer.NewTask("reminder", nil), producer.ProcessIn(1500*time.Millisecond))
	if !res.Scheduled || res.ProcessAt.IsZero() {
		t.Fatalf("enqueue result %+v, want scheduled", res)
	}
	if want := s.names.Prefix() + ".sched." + res.ID; res.Subject != want {
		t.Errorf("subject %q, want %q", res.Subject, want)
	}
	if r, err := s.client.Result(streamstest.Context(t), res.ID); err == nil && r.State != spool.StateScheduled && !r.State.Terminal() {
		t.Errorf("before its time the task is %s", r.State)
	}
	r := s.wait(res.ID, spool.StateCompleted)
	at := <-ran
	if at.Before(res.ProcessAt) {
		t.Errorf("ran at %s, before its time %s", at.Format(time.RFC3339Nano), res.ProcessAt.Format(time.RFC3339Nano))
	}
	if r.StartedAt == nil || r.StartedAt.Before(res.ProcessAt) {
		t.Errorf("started at %v, before its time %s", r.StartedAt, res.ProcessAt)
	}
}

// A unique key refuses a second task while the first lives, and is free
// again once the first completed.
func testUnique(t *testing.T, s *stack) {
	running, release := make(chan string, 2), make(chan struct{})
	mux := consumer.NewMux()
	mux.HandleFunc("invoice.send", func(ctx context.Context, task *consumer.Task) ([]byte, error) {
		running <- task.ID
		select {
		case <-release:
			return nil, nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	})
	s.worker(mux)
	first := s.enqueue(producer.NewTask("invoice.send", nil), producer.Unique("invoice:42", time.Minute))
	if got := <-running; got != first.ID {
		t.Fatalf("running %s, want %s", got, first.ID)
	}
	_, err := s.client.Enqueue(streamstest.Context(t), producer.NewTask("invoice.send", nil), producer.Unique("invoice:42", time.Minute))
	var conflict *producer.UniqueConflictError
	if !errors.Is(err, producer.ErrUniqueConflict) || !errors.As(err, &conflict) {
		t.Fatalf("second enqueue: %v, want a unique conflict", err)
	}
	close(release)
	s.wait(first.ID, spool.StateCompleted)
	// Completed releases the key (before the task is removed).
	s.waitEmpty()
	third := s.enqueue(producer.NewTask("invoice.send", nil), producer.Unique("invoice:42", time.Minute))
	<-running
	s.wait(third.ID, spool.StateCompleted)
}

// With a backlog in two priorities, a single slot serves both: the less
// urgent one is not starved until the more urgent one is empty.
func testPriorities(t *testing.T, s *stack) {
	const high, low = 30, 10
	tasks := make([]producer.Task, 0, high+low)
	for range high {
		tasks = append(tasks, producer.Task{Type: "work", Priority: new(spool.High)})
	}
	for range low {
		tasks = append(tasks, producer.Task{Type: "work", Priority: new(spool.Low)})
	}
	results, err := s.client.EnqueueBatch(streamstest.Context(t), tasks)
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan spool.Priority, high+low)
	mux := consumer.NewMux()
	mux.HandleFunc("work", func(ctx context.Context, task *consumer.Task) ([]byte, error) {
		served <- task.Priority
		return nil, nil
	})
	s.worker(mux, consumer.WithConcurrency(1, 1))
	for _, r := range results {
		s.wait(r.ID, spool.StateCompleted)
	}
	close(served)
	firstLow, lastHigh, i := -1, -1, 0
	for p := range served {
		switch {
		case p == spool.Low && firstLow < 0:
			firstLow = i
		case p == spool.High:
			lastHigh = i
		}
		i++
	}
	if i != high+low {
		t.Fatalf("%d tasks served, want %d", i, high+low)
	}
	if firstLow < 0 || firstLow > lastHigh {
		t.Errorf("first low task served at %d, after the last high one at %d: low was starved", firstLow, lastHigh)
	}
}

// A graceful stop hands running tasks back at once (pending, not failed),
// and another worker then completes them.
func testGracefulStop(t *testing.T, s *stack) {
	const n = 3
	running := make(chan string, n)
	stuck := consumer.NewMux()
	stuck.HandleFunc("long", func(ctx context.Context, task *consumer.Task) ([]byte, error) {
		running <- task.ID
		<-ctx.Done() // finishes only when cancelled
		return nil, ctx.Err()
	})
	w := s.worker(stuck, consumer.WithConcurrency(n, n), consumer.WithShutdownTimeout(100*time.Millisecond))
	ids := make([]string, n)
	for i := range ids {
		ids[i] = s.enqueue(producer.NewTask("long", nil)).ID
	}
	for range n {
		<-running
	}
	if err := w.Stop(streamstest.Context(t)); err != nil {
		t.Fatalf("stop: %v", err)
	}
	st := w.Stats()
	if tot := st.Total(); tot.Returned != n || tot.Completed != 0 || tot.Failed != 0 || st.State != consumer.WorkerStopped {
		t.Fatalf("after stop: %+v, state %s; want %d returned", tot, st.State, n)
	}
	// Result reads with a direct get, which any replica of an R3 bucket
	// answers: one that has not applied the hand-back's write yet answers
	// the state before it, so the check waits (briefly) for the replica.
	for _, id := range ids {
		streamstest.WaitFor(t, 5*time.Second, func() error {
			r, err := s.client.Result(streamstest.Context(t), id)
			if err != nil || r.State != spool.StatePending {
				return fmt.Errorf("handed-back task %s: %+v, %v; want pending", id, r, err)
			}
			return nil
		})
	}
	done := consumer.NewMux()
	done.HandleFunc("long", func(ctx context.Context, task *consumer.Task) ([]byte, error) { return nil, nil })
	s.worker(done, consumer.WithConcurrency(n, n))
	// Well before AckWait (30s) would return them: they came back at once.
	ctx, cancel := context.WithTimeout(t.Context(), 15*time.Second)
	defer cancel()
	for _, id := range ids {
		if r, err := s.client.Wait(ctx, id); err != nil || r.State != spool.StateCompleted {
			t.Fatalf("handed-back task %s: %+v, %v; want completed", id, r, err)
		}
	}
}
