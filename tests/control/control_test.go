package control_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/spoolq/spool/consumer"
	"github.com/spoolq/spool/consumer/remote"
	"github.com/spoolq/spool/producer"
	spool "github.com/spoolq/spool/shared"
	"github.com/spoolq/spool/streams"
	"github.com/spoolq/spool/streams/streamstest"
)

type stack struct {
	env    *streamstest.Env
	client *producer.Client
}

func newStack(t *testing.T) *stack {
	t.Helper()
	return newStackWith(t, streams.Settings{})
}

// newStackWith provisions the topology with settings.
func newStackWith(t *testing.T, settings streams.Settings) *stack {
	t.Helper()
	env := streamstest.Start(t, settings)
	client, err := producer.New(env.Connect(t), producer.WithLogger(streamstest.Logger(t)))
	if err != nil {
		t.Fatal(err)
	}
	return &stack{env: env, client: client}
}

func (s *stack) worker(t *testing.T, h consumer.Handler) *consumer.Worker {
	t.Helper()
	w, err := consumer.New(s.env.Connect(t), h, consumer.WithLogger(streamstest.Logger(t)),
		consumer.WithWorkerName("control-worker"), consumer.WithPolling(100*time.Millisecond, 50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(streamstest.Context(t)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := w.Stop(ctx); err != nil {
			t.Errorf("stopping worker: %v", err)
		}
	})
	return w
}

// next reads one event from a raw subscription.
func next(t *testing.T, sub *nats.Subscription) (string, spool.Event) {
	t.Helper()
	m, err := sub.NextMsg(10 * time.Second)
	if err != nil {
		t.Fatalf("waiting for an event: %v", err)
	}
	var ev spool.Event
	if err := json.Unmarshal(m.Data, &ev); err != nil {
		t.Fatalf("event %q: %v", m.Data, err)
	}
	return m.Subject, ev
}

// Every state change of a task is published on spool.events.<kind>.<priority>.<id>.<type>,
// seen by a plain nats.go subscriber and by Client.Watch, progress included.
func TestEventsAndProgress(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	ctx := streamstest.Context(t)
	raw := s.env.Connect(t)
	sub, err := raw.SubscribeSync("spool.events.>")
	if err != nil {
		t.Fatal(err)
	}
	if err := raw.Flush(); err != nil {
		t.Fatal(err)
	}
	watch, err := s.client.Watch(ctx, "ev-1")
	if err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	mux := consumer.NewMux()
	mux.HandleFunc("report.build", func(ctx context.Context, task *consumer.Task) ([]byte, error) {
		if err := task.Progress(50, json.RawMessage(`{"pages":5}`)); err != nil {
			return nil, err
		}
		<-release
		return []byte(`{"pages":10}`), nil
	})
	s.worker(t, mux)
	if _, err := s.client.Enqueue(ctx, producer.NewTask("report.build", nil), producer.TaskID("ev-1"), producer.AtPriority(spool.High)); err != nil {
		t.Fatal(err)
	}
	// enqueued (from the producer) and started (from the worker) come from
	// two connections: their order is not fixed. Progress follows started.
	seen := map[spool.EventKind]bool{}
	for !seen[spool.EventProgress] {
		subj, ev := next(t, sub)
		if ev.Task.ID != "ev-1" || subj != "spool.events."+string(ev.Event)+".high.ev-1.report.build" {
			t.Fatalf("raw event %s %+v", subj, ev)
		}
		if ev.Event == spool.EventProgress {
			if !seen[spool.EventStarted] {
				t.Fatalf("progress before started")
			}
			if ev.Task.Progress == nil || *ev.Task.Progress.Percent != 50 || string(ev.Task.Progress.Value) != `{"pages":5}` {
				t.Fatalf("progress event %+v", ev.Task.Progress)
			}
		}
		seen[ev.Event] = true
	}
	if !seen[spool.EventEnqueued] {
		if _, ev := next(t, sub); ev.Event != spool.EventEnqueued {
			t.Fatalf("event %s, want the enqueued event", ev.Event)
		}
	}
	// The result document shows the progress while the task runs.
	r, err := s.client.Result(ctx, "ev-1")
	if err != nil || r.State != spool.StateProcessing || r.Progress == nil || *r.Progress.Percent != 50 {
		t.Fatalf("running task's result %+v, %v", r, err)
	}
	close(release)
	if subj, ev := next(t, sub); ev.Event != spool.EventCompleted || string(ev.Task.Result) != `{"pages":10}` || subj != "spool.events.completed.high.ev-1.report.build" {
		t.Fatalf("raw event %s %+v, want completed", subj, ev)
	}
	var got []spool.EventKind
	for ev := range watch {
		got = append(got, ev.Event)
	}
	if len(got) == 0 {
		t.Fatal("the watch saw no event")
	}
	slices.Sort(got[:len(got)-1])
	want := []spool.EventKind{spool.EventEnqueued, spool.EventProgress, spool.EventStarted, spool.EventCompleted}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("watched %v, want %v (the first three in any order)", got, want)
	}
}

// A remote handler reports progress on the request's Spool-Progress-Subject;
// Client.Cancel then cancels it while it runs.
func TestRemoteProgressAndCancel(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	ctx := streamstest.Context(t)
	rc := s.env.Connect(t)
	cancelled := make(chan string, 1)
	if _, err := rc.Subscribe("svc.render", func(m *nats.Msg) {
		id := m.Header.Get(spool.HeaderTaskID)
		stop, err := rc.SubscribeSync("$KV.spool_cancel." + id)
		if err != nil {
			t.Error(err)
			return
		}
		defer func() { _ = stop.Unsubscribe() }()
		if err := rc.Publish(m.Header.Get(remote.HeaderProgressSubject), []byte(`{"percent":25,"value":{"frame":1}}`)); err != nil {
			t.Error(err)
		}
		if c, err := stop.NextMsg(10 * time.Second); err == nil {
			cancelled <- string(c.Data)
		}
	}); err != nil {
		t.Fatal(err)
	}
	if err := rc.Flush(); err != nil {
		t.Fatal(err)
	}
	mux := consumer.NewMux()
	mux.Handle("render", remote.Handler(s.env.Connect(t), "svc.render"))
	s.worker(t, mux)
	watch, err := s.client.Watch(ctx, "rp-1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.client.Enqueue(ctx, producer.NewTask("render", nil), producer.TaskID("rp-1")); err != nil {
		t.Fatal(err)
	}
	for ev := range watch {
		if ev.Event != spool.EventProgress {
			continue
		}
		if ev.Task.Progress == nil || *ev.Task.Progress.Percent != 25 || string(ev.Task.Progress.Value) != `{"frame":1}` {
			t.Fatalf("remote progress %+v", ev.Task.Progress)
		}
		break
	}
	res, err := s.client.Cancel(ctx, "rp-1", producer.CancelBy("ops"), producer.CancelReason("customer left"))
	if err != nil || res.State != spool.StateCancelled {
		t.Fatalf("cancel: %+v, %v", res, err)
	}
	select {
	case c := <-cancelled:
		var doc spool.Cancellation
		if err := json.Unmarshal([]byte(c), &doc); err != nil || doc.By != "ops" {
			t.Fatalf("the remote handler saw %q, %v", c, err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the remote handler saw no cancellation")
	}
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	r, err := s.client.Wait(wctx, "rp-1")
	if err != nil || r.State != spool.StateCancelled || r.CancelledBy != "ops" || r.CancelReason != "customer left" {
		t.Fatalf("final state %+v, %v", r, err)
	}
	streamstest.WaitFor(t, 5*time.Second, func() error {
		info, err := s.env.Stream(t, "SPOOL_TASKS").Info(ctx)
		if err != nil {
			return err
		}
		if info.State.Msgs != 0 {
			return errors.New("the cancelled task left the stream")
		}
		return nil
	})
	if _, err := s.client.Cancel(ctx, "rp-1"); !errors.Is(err, producer.ErrTaskFinished) {
		t.Fatalf("second cancel: %v", err)
	}
}
