package conformance_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/spoolq/spool/consumer"
	"github.com/spoolq/spool/producer"
	spool "github.com/spoolq/spool/shared"
	"github.com/spoolq/spool/streams/streamstest"
)

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
	cons, err := s.taskConsumer(s.names.TaskStream(), spool.Normal, "crashes.worker")
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
