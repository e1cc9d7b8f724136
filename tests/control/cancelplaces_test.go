package control_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/spoolq/spool/consumer"
	"github.com/spoolq/spool/producer"
	spool "github.com/spoolq/spool/shared"
	"github.com/spoolq/spool/shared/limits"
	"github.com/spoolq/spool/streams"
	"github.com/spoolq/spool/streams/admin"
	"github.com/spoolq/spool/streams/streamstest"
)

// placeRuns records the attempts the handler started and lets a test hold
// a running task until it lets it go.
type placeRuns struct {
	mu      sync.Mutex
	runs    map[string]int
	started map[string]chan struct{}
	release map[string]chan struct{}
	causes  map[string]error
}

func newPlaceRuns() *placeRuns {
	return &placeRuns{runs: map[string]int{}, started: map[string]chan struct{}{}, release: map[string]chan struct{}{}, causes: map[string]error{}}
}

// hold makes task id's handler wait, once started, until let(id) or its
// context ends.
func (r *placeRuns) hold(id string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.started[id], r.release[id] = make(chan struct{}), make(chan struct{})
}

// let lets task id's held handler return; once is enough, more is no-op.
func (r *placeRuns) let(id string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	select {
	case <-r.release[id]:
	default:
		close(r.release[id])
	}
}

func (r *placeRuns) count(id string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.runs[id]
}

func (r *placeRuns) handle(ctx context.Context, task *consumer.Task) ([]byte, error) {
	r.mu.Lock()
	r.runs[task.ID]++
	started, release := r.started[task.ID], r.release[task.ID]
	r.mu.Unlock()
	if string(task.Payload) == "fail-once" && task.Attempt == 1 {
		return nil, consumer.RetryAfter(errors.New("first attempt fails"), 3*time.Second)
	}
	if started == nil {
		return nil, nil
	}
	close(started)
	select {
	case <-release:
		return nil, nil
	case <-ctx.Done():
		r.mu.Lock()
		r.causes[task.ID] = context.Cause(ctx)
		r.mu.Unlock()
		return nil, ctx.Err()
	}
}

// waitStarted waits until task id's held handler runs.
func (r *placeRuns) waitStarted(t *testing.T, id string) {
	t.Helper()
	r.mu.Lock()
	ch := r.started[id]
	r.mu.Unlock()
	select {
	case <-ch:
	case <-time.After(30 * time.Second):
		t.Fatalf("task %s did not start", id)
	}
}

// Cancel reaches a task in every place it can wait or run: queued on a
// paused priority, delayed, in retry backoff, parked by a type pause, held
// for an ordered or a fair key's turn, in a concurrency limit's waiting
// room, handed back by a rate limit, and running. Each ends cancelled, is
// then in no place of the task stream, and never runs (a running one is
// not run again); a key's turn and a limit's slot go on to the next task.
func TestCancelInEveryPlace(t *testing.T) {
	t.Parallel()
	// Pulling by priority, a paused type's tasks are parked; pulling by
	// type, its own consumers are paused and its tasks stay queued.
	s := newStackWith(t, streams.Settings{Consumers: streams.ConsumersByPriority})
	ctx := streamstest.Context(t)
	nc := s.env.Connect(t)
	adm, err := admin.New(nc, admin.WithLogger(streamstest.Logger(t)))
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range []limits.Rule{
		{Type: "place.ordered", Ordered: limits.OrderHold},
		{Type: "place.fair", Fair: &limits.Fair{Window: 1}},
		{Type: "place.room", Concurrency: 1},
		{Type: "place.rate", Rate: &limits.Rate{Limit: 1, Period: limits.Duration(time.Minute)}},
		{Type: "place.orate", Ordered: limits.OrderHold, Rate: &limits.Rate{Limit: 1, Period: limits.Duration(2 * time.Second)}},
	} {
		if err := adm.SetLimit(ctx, r); err != nil {
			t.Fatalf("setting the limit of %s: %v", r.Type, err)
		}
	}
	runs := newPlaceRuns()
	mux := consumer.NewMux()
	for _, typ := range []string{"queued", "delayed", "retry", "parked", "ordered", "fair", "room", "rate", "orate", "running"} {
		mux.HandleFunc("place."+typ, runs.handle)
	}
	s.worker(t, mux)
	names := spool.DefaultNames()
	tasks := s.env.Stream(t, names.TaskStream())

	enqueue := func(t *testing.T, typ, id, key, payload string, p spool.Priority, delay time.Duration) {
		t.Helper()
		ctx := streamstest.Context(t)
		_, err := s.client.Enqueue(ctx, producer.Task{ID: id, Type: typ, Key: key, Priority: &p, Payload: []byte(payload), Delay: delay})
		if err != nil {
			t.Fatalf("enqueueing %s: %v", id, err)
		}
	}
	// waitIn waits until task id is in place, and checks that the
	// queue's status counts it there.
	waitIn := func(t *testing.T, id string, place streams.Place) {
		t.Helper()
		ctx := streamstest.Context(t)
		streamstest.WaitFor(t, 30*time.Second, func() error {
			f, err := streams.FindTask(ctx, tasks, names, id)
			if err != nil {
				return err
			}
			if f == nil || f.Place != place {
				return fmt.Errorf("task %s is not %s yet (%+v)", id, place, f)
			}
			return nil
		})
		st, err := adm.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		n := map[streams.Place]uint64{streams.PlaceScheduled: st.Scheduled, streams.PlaceParked: st.Parked,
			streams.PlaceHeld: st.Held, streams.PlaceWaitingRoom: st.WaitingRoom}[place]
		if n == 0 {
			t.Errorf("task %s is %s, the status counts none there: %+v", id, place, st)
		}
	}
	// cancel cancels id and checks the answer.
	cancel := func(t *testing.T, id string) {
		t.Helper()
		ctx := streamstest.Context(t)
		doc, err := s.client.Cancel(ctx, id, producer.CancelBy("places"), producer.CancelReason("test"))
		if err != nil {
			t.Fatalf("cancelling %s: %v", id, err)
		}
		if doc.State != spool.StateCancelled || doc.CancelledBy != "places" {
			t.Fatalf("cancelling %s answered %+v", id, doc)
		}
	}
	// gone waits until id is cancelled and in no place of the task
	// stream, and checks it ran want times.
	gone := func(t *testing.T, id string, want int) {
		t.Helper()
		ctx := streamstest.Context(t)
		streamstest.WaitFor(t, 30*time.Second, func() error {
			f, err := streams.FindTask(ctx, tasks, names, id)
			if err != nil {
				return err
			}
			if f != nil {
				return fmt.Errorf("task %s is still %s on %s", id, f.Place, f.Msg.Subject)
			}
			doc, err := s.client.Result(ctx, id)
			if err != nil {
				return err
			}
			if doc.State != spool.StateCancelled || doc.CancelledBy != "places" || doc.CancelReason != "test" {
				return fmt.Errorf("task %s is %s (by %q)", id, doc.State, doc.CancelledBy)
			}
			return nil
		})
		if n := runs.count(id); n != want {
			t.Errorf("task %s, cancelled, ran %d times; want %d", id, n, want)
		}
	}
	completes := func(t *testing.T, id string) {
		t.Helper()
		if doc := waitCompleted(t, s.client, id); doc.Attempts != 1 {
			t.Errorf("task %s completed on attempt %d", id, doc.Attempts)
		}
	}

	t.Run("queued", func(t *testing.T) {
		ctx := streamstest.Context(t)
		if _, err := adm.PausePriority(ctx, spool.Low, admin.Forever); err != nil {
			t.Fatal(err)
		}
		enqueue(t, "place.queued", "queued-1", "", "", spool.Low, 0)
		cancel(t, "queued-1")
		if err := adm.ResumePriority(ctx, spool.Low); err != nil {
			t.Fatal(err)
		}
		gone(t, "queued-1", 0)
	})
	t.Run("delayed", func(t *testing.T) {
		enqueue(t, "place.delayed", "delayed-1", "", "", spool.Normal, time.Second)
		cancel(t, "delayed-1")
		enqueue(t, "place.delayed", "delayed-2", "", "", spool.Normal, 2*time.Second)
		completes(t, "delayed-2") // fired after delayed-1's time
		gone(t, "delayed-1", 0)
	})
	t.Run("retry backoff", func(t *testing.T) {
		enqueue(t, "place.retry", "retry-1", "", "fail-once", spool.Normal, 0)
		streamstest.WaitFor(t, 30*time.Second, func() error {
			doc, err := s.client.Result(streamstest.Context(t), "retry-1")
			if err != nil || doc.State != spool.StateRetrying {
				return fmt.Errorf("retry-1 is %s (%v)", doc.State, err)
			}
			return nil
		})
		cancel(t, "retry-1")
		gone(t, "retry-1", 1)
	})
	t.Run("parked by a type pause", func(t *testing.T) {
		ctx := streamstest.Context(t)
		if _, err := adm.PauseType(ctx, "place.parked", admin.TypePauseOptions{By: "places"}); err != nil {
			t.Fatal(err)
		}
		enqueue(t, "place.parked", "parked-1", "", "", spool.Normal, 0)
		waitIn(t, "parked-1", streams.PlaceParked)
		cancel(t, "parked-1")
		if err := adm.ResumeType(ctx, "place.parked"); err != nil {
			t.Fatal(err)
		}
		gone(t, "parked-1", 0)
		enqueue(t, "place.parked", "parked-2", "", "", spool.Normal, 0)
		completes(t, "parked-2")
	})
	for _, typ := range []string{"place.ordered", "place.fair"} {
		t.Run("held for the key's turn of "+typ, func(t *testing.T) {
			name := typ[len("place."):]
			first, held, after := name+"-1", name+"-2", name+"-3"
			runs.hold(first)
			defer runs.let(first)
			enqueue(t, typ, first, "acct-1", "", spool.Normal, 0)
			runs.waitStarted(t, first)
			enqueue(t, typ, held, "acct-1", "", spool.Normal, 0)
			waitIn(t, held, streams.PlaceHeld)
			cancel(t, held)
			enqueue(t, typ, after, "acct-1", "", spool.Normal, 0)
			runs.let(first)
			completes(t, first)
			gone(t, held, 0)
			completes(t, after) // the cancelled task passed the turn on
		})
	}
	t.Run("waiting room", func(t *testing.T) {
		runs.hold("room-1")
		defer runs.let("room-1")
		enqueue(t, "place.room", "room-1", "", "", spool.Normal, 0)
		runs.waitStarted(t, "room-1")
		enqueue(t, "place.room", "room-2", "", "", spool.Normal, 0)
		waitIn(t, "room-2", streams.PlaceWaitingRoom)
		cancel(t, "room-2")
		enqueue(t, "place.room", "room-3", "", "", spool.Normal, 0)
		runs.let("room-1")
		completes(t, "room-1")
		gone(t, "room-2", 0)
		completes(t, "room-3") // the slot went on past the cancelled task
	})
	t.Run("rate hand-back", func(t *testing.T) {
		enqueue(t, "place.rate", "rate-1", "", "", spool.Normal, 0)
		completes(t, "rate-1")
		enqueue(t, "place.rate", "rate-2", "", "", spool.Normal, 0)
		waitIn(t, "rate-2", streams.PlaceScheduled)
		cancel(t, "rate-2")
		gone(t, "rate-2", 0)
	})
	// A task handed back by a rate limit while it holds its key's turn
	// (released from the held subject) is left to fire, not deleted: the
	// worker that drops it passes the turn on, so the key goes on.
	t.Run("rate hand-back holding its key's turn", func(t *testing.T) {
		enqueue(t, "place.orate", "orate-1", "acct-1", "", spool.Normal, 0)
		completes(t, "orate-1")
		enqueue(t, "place.orate", "orate-2", "acct-1", "", spool.Normal, 0)
		waitIn(t, "orate-2", streams.PlaceScheduled)
		cancel(t, "orate-2")
		enqueue(t, "place.orate", "orate-3", "acct-1", "", spool.Normal, 0)
		gone(t, "orate-2", 0)
		completes(t, "orate-3")
	})
	t.Run("running", func(t *testing.T) {
		runs.hold("running-1")
		enqueue(t, "place.running", "running-1", "", "", spool.Normal, 0)
		runs.waitStarted(t, "running-1")
		cancel(t, "running-1")
		gone(t, "running-1", 1)
		runs.mu.Lock()
		cause := runs.causes["running-1"]
		runs.mu.Unlock()
		if !errors.Is(cause, consumer.ErrCancelled) {
			t.Errorf("the running handler's context ended with %v, want consumer.ErrCancelled", cause)
		}
	})
}
