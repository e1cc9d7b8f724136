package control_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/spoolq/spool/consumer"
	"github.com/spoolq/spool/producer"
	spool "github.com/spoolq/spool/shared"
	"github.com/spoolq/spool/streams"
	"github.com/spoolq/spool/streams/streamstest"
)

// Cancel races the completion of a handler that returns at the moment of
// the cancel (and ignores its context), many times: the outcome has one
// writer. Whenever Cancel reported success the task ends cancelled and no
// completed state or event follows; whenever it reported the task
// finished, the task is in the finished state it reported.
//
// With a processing delay of 0 every attempt writes its processing state
// as it starts, so every completion's write meets a changed revision and
// takes the re-read path. A task whose result is discarded races the same
// way: its completion writes the marker that it completed instead of a
// document.
func TestCancelRacesCompletion(t *testing.T) {
	t.Parallel()
	for name, opt := range map[string]consumer.Option{
		"processing_delay_1s": consumer.WithProcessingDelay(time.Second),
		"processing_delay_0":  consumer.WithProcessingDelay(0),
		"results_discarded":   consumer.WithDiscardResults("race"),
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			cancelRace(t, opt)
		})
	}
}

func cancelRace(t *testing.T, opts ...consumer.Option) {
	const rounds = 60
	// By priority: the check below reads the five priority consumers.
	env := streamstest.Start(t, streams.Settings{Consumers: streams.ConsumersByPriority})
	ctx := streamstest.Context(t)
	client, err := producer.New(env.Connect(t), producer.WithLogger(streamstest.Logger(t)))
	if err != nil {
		t.Fatal(err)
	}
	// Every completed event, by task id.
	var evMu sync.Mutex
	completedEvents := map[string]int{}
	evConn := env.Connect(t)
	sub, err := evConn.Subscribe("spool.events.completed.>", func(m *nats.Msg) {
		var ev spool.Event
		if err := json.Unmarshal(m.Data, &ev); err != nil {
			t.Errorf("event %q: %v", m.Data, err)
			return
		}
		evMu.Lock()
		completedEvents[ev.Task.ID]++
		evMu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	// The server has the subscription once a round trip after it returns.
	if err := evConn.Flush(); err != nil {
		t.Fatal(err)
	}

	var mu sync.Mutex
	started := map[string]chan struct{}{}
	release := map[string]chan struct{}{}
	for i := range rounds {
		id := fmt.Sprintf("race-%02d", i)
		started[id], release[id] = make(chan struct{}), make(chan struct{})
	}
	mux := consumer.NewMux()
	mux.HandleFunc("race", func(ctx context.Context, task *consumer.Task) ([]byte, error) {
		mu.Lock()
		s, r := started[task.ID], release[task.ID]
		mu.Unlock()
		if s == nil {
			return nil, consumer.Permanent(fmt.Errorf("unexpected task %s", task.ID))
		}
		select {
		case <-s:
		default:
			close(s)
		}
		<-r // ignores ctx: the handler finishes whatever the cancel does
		return []byte(`"done"`), nil
	})
	workerConn := env.Connect(t)
	w, err := consumer.New(workerConn, mux, append([]consumer.Option{consumer.WithLogger(streamstest.Logger(t)),
		consumer.WithWorkerName("race-worker"), consumer.WithConcurrency(rounds, rounds),
		consumer.WithPolling(100*time.Millisecond, 50*time.Millisecond)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := w.Stop(context.WithoutCancel(ctx)); err != nil {
			t.Errorf("stopping the worker: %v", err)
		}
	}()
	for id := range started {
		if _, err := client.Enqueue(ctx, producer.Task{Type: "race", ID: id}); err != nil {
			t.Fatal(err)
		}
	}
	for id, s := range started {
		select {
		case <-s:
		case <-ctx.Done():
			t.Fatalf("task %s never started", id)
		}
	}
	// Release the handlers of even rounds as their cancellation is stored
	// (Cancel then writes the cancelled state as the handler returns), the
	// others as Cancel is called.
	tombConn := env.Connect(t)
	tomb, err := tombConn.Subscribe("$KV.spool_cancel.>", func(m *nats.Msg) {
		id := m.Subject[len("$KV.spool_cancel."):]
		var n int
		if _, err := fmt.Sscanf(id, "race-%d", &n); err == nil && n%2 == 0 {
			close(release[id])
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tomb.Unsubscribe() }()
	// The server has the subscription once a round trip after it returns:
	// a cancellation stored before would never release its handler.
	if err := tombConn.Flush(); err != nil {
		t.Fatal(err)
	}
	// Cancel every task at the same moment.
	type answer struct {
		doc spool.Result
		err error
	}
	answers := make(map[string]answer, rounds)
	var wg sync.WaitGroup
	for i := range rounds {
		id := fmt.Sprintf("race-%02d", i)
		if i%2 == 1 {
			wg.Add(1)
			go func() { defer wg.Done(); close(release[id]) }()
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			doc, err := client.Cancel(ctx, id, producer.CancelBy("racer"))
			mu.Lock()
			answers[id] = answer{doc, err}
			mu.Unlock()
		}()
	}
	wg.Wait()
	// Every task settled: nothing queued or unacked.
	streamstest.WaitFor(t, 20*time.Second, func() error {
		for _, p := range spool.Priorities {
			c, err := env.JS.Consumer(ctx, "SPOOL_TASKS", "spool-"+p.String())
			if err != nil {
				return err
			}
			info, err := c.Info(ctx)
			if err != nil {
				return err
			}
			if info.NumPending+uint64(info.NumAckPending) != 0 {
				return fmt.Errorf("%s: %d tasks not settled", p, info.NumPending+uint64(info.NumAckPending))
			}
		}
		return nil
	})
	// Events are core messages sent as a task settles (just after its
	// ack): a round trip on the worker's connection after the settling has
	// the server route what it sent, one on the subscriber's connection
	// then delivers it, and a barrier after that waits for the handler to
	// have counted it (Unsubscribe drops what is delivered but unhandled).
	if err := workerConn.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := evConn.Flush(); err != nil {
		t.Fatal(err)
	}
	counted := make(chan struct{})
	if err := evConn.Barrier(func() { close(counted) }); err != nil {
		t.Fatal(err)
	}
	select {
	case <-counted:
	case <-ctx.Done():
		t.Fatal("the completed events were not handled")
	}
	if err := sub.Unsubscribe(); err != nil {
		t.Fatal(err)
	}
	won, lost := 0, 0
	for id, a := range answers {
		doc, err := client.Result(ctx, id)
		if errors.Is(err, producer.ErrResultDiscarded) {
			doc, err = spool.Result{ID: id, State: spool.StateCompleted}, nil
		}
		if err != nil {
			t.Errorf("reading task %s: %v", id, err)
			continue
		}
		evMu.Lock()
		completed := completedEvents[id]
		evMu.Unlock()
		switch {
		case a.err == nil:
			won++
			if doc.State != spool.StateCancelled || doc.CancelledBy != "racer" {
				t.Errorf("task %s: Cancel succeeded, the task ended %s (by %q)", id, doc.State, doc.CancelledBy)
			}
			if completed != 0 {
				t.Errorf("task %s: Cancel succeeded, and a completed event followed", id)
			}
		case errors.Is(a.err, producer.ErrTaskFinished):
			lost++
			if a.doc.State != doc.State || doc.State != spool.StateCompleted {
				t.Errorf("task %s: Cancel reported it %s, it ended %s", id, a.doc.State, doc.State)
			}
		default:
			t.Errorf("cancelling task %s: %v", id, a.err)
		}
	}
	t.Logf("%d rounds: the cancel won %d, the completion won %d", rounds, won, lost)
}
