package consumer_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/spoolq/spool/consumer"
	"github.com/spoolq/spool/consumer/remote"
	spool "github.com/spoolq/spool/shared"
	"github.com/spoolq/spool/streams"
	"github.com/spoolq/spool/streams/streamstest"
)

// cancel stores a cancellation the way any NATS client can: a KV put of
// the Cancellation document under the task id in spool_cancel.
func (e *env) cancel(id, by, reason string) {
	e.t.Helper()
	kv, err := e.js.KeyValue(testCtx(e.t), e.names.CancelBucket())
	if err != nil {
		e.t.Fatal(err)
	}
	b, err := json.Marshal(spool.Cancellation{ID: id, By: by, Reason: reason, At: time.Now().UTC()})
	if err != nil {
		e.t.Fatal(err)
	}
	if _, err := kv.Put(testCtx(e.t), id, b); err != nil {
		e.t.Fatal(err)
	}
}

// wantCancelled checks the final document of a cancelled task, and that
// the task left the stream without a dead letter.
func (e *env) wantCancelled(id, by, reason string) {
	e.t.Helper()
	doc := e.waitResult(id, spool.StateCancelled, 10*time.Second)
	if doc.CancelledBy != by || doc.CancelReason != reason || doc.FinishedAt == nil || doc.Worker != "test-worker" {
		e.t.Errorf("cancelled document %+v", doc)
	}
	streamstest.WaitFor(e.t, 5*time.Second, func() error {
		if n := e.taskMsgs(); n != 0 {
			return errors.New("cancelled task removed from the stream")
		}
		return nil
	})
	s, err := e.js.Stream(testCtx(e.t), e.names.DLQStream())
	if err != nil {
		e.t.Fatal(err)
	}
	if info, err := s.Info(testCtx(e.t)); err != nil || info.State.Msgs != 0 {
		e.t.Errorf("dead letters after a cancel: %+v, %v", info, err)
	}
}

// A task cancelled while queued never runs; the worker drops it and the
// others run.
func TestCancelQueuedTaskNeverRuns(t *testing.T) {
	t.Parallel()
	e := newEnv(t, streams.Settings{})
	e.cancel("q1", "ops", "obsolete")
	e.publishID(spool.Normal, "work", "q1", nil, nil)
	e.publishID(spool.Normal, "work", "q2", nil, nil)
	var ran atomic.Int32
	mux := consumer.NewMux()
	mux.HandleFunc("work", func(ctx context.Context, task *consumer.Task) ([]byte, error) {
		if task.ID == "q1" {
			ran.Add(1)
		}
		return nil, nil
	})
	e.worker(mux)
	e.waitResult("q2", spool.StateCompleted, 10*time.Second)
	e.wantCancelled("q1", "ops", "obsolete")
	if n := ran.Load(); n != 0 {
		t.Fatalf("cancelled task ran %d times", n)
	}
}

// A running local handler has its context cancelled within a second, with
// ErrCancelled as the cause; the task is not retried.
func TestCancelRunningLocalTask(t *testing.T) {
	t.Parallel()
	e := newEnv(t, streams.Settings{})
	started := make(chan struct{})
	var calls atomic.Int32
	cause := make(chan error, 1)
	mux := consumer.NewMux()
	mux.HandleFunc("long", func(ctx context.Context, task *consumer.Task) ([]byte, error) {
		if calls.Add(1) == 1 {
			close(started)
		}
		<-ctx.Done()
		cause <- context.Cause(ctx)
		return nil, ctx.Err()
	})
	e.worker(mux, consumer.WithRetry(10*time.Millisecond, 10*time.Millisecond, 5))
	e.publishID(spool.High, "long", "r1", nil, nil)
	select {
	case <-started:
	case <-time.After(10 * time.Second):
		t.Fatal("handler never started")
	}
	at := time.Now()
	e.cancel("r1", "ada", "wrong customer")
	select {
	case err := <-cause:
		if !errors.Is(err, consumer.ErrCancelled) {
			t.Errorf("cause %v, want ErrCancelled", err)
		}
		if d := time.Since(at); d > time.Second {
			t.Errorf("handler cancelled after %s", d)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("handler context not cancelled")
	}
	e.wantCancelled("r1", "ada", "wrong customer")
	if n := calls.Load(); n != 1 {
		t.Fatalf("handler called %d times", n)
	}
}

// A remote handler learns of the cancel on $KV.spool_cancel.<task-id>, and
// the worker stops waiting for its reply.
func TestCancelRunningRemoteTask(t *testing.T) {
	t.Parallel()
	e := newEnv(t, streams.Settings{})
	rc := e.connect()
	seen := make(chan spool.Cancellation, 1)
	started := make(chan struct{}, 1)
	_, err := rc.Subscribe("svc.long", func(m *nats.Msg) {
		// A responder watches the cancel subject of the task it serves.
		id := m.Header.Get(spool.HeaderTaskID)
		sub, err := rc.SubscribeSync(e.names.CancelSubject(id))
		if err != nil {
			t.Error(err)
			return
		}
		defer func() { _ = sub.Unsubscribe() }()
		// The server has the subscription once a round trip after it
		// returns: the test cancels as soon as it hears of the start.
		if err := rc.Flush(); err != nil {
			t.Error(err)
			return
		}
		started <- struct{}{}
		c, err := sub.NextMsg(10 * time.Second)
		if err != nil {
			t.Error(err)
			return
		}
		var doc spool.Cancellation
		if err := json.Unmarshal(c.Data, &doc); err != nil {
			t.Error(err)
		}
		seen <- doc // and stop working, without a reply: the worker stopped waiting
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := rc.Flush(); err != nil {
		t.Fatal(err)
	}
	mux := consumer.NewMux()
	mux.Handle("long", remote.Handler(e.connect(), "svc.long"))
	e.worker(mux)
	e.publishID(spool.Normal, "long", "rr1", nil, nil)
	select {
	case <-started:
	case <-time.After(10 * time.Second):
		t.Fatal("remote handler never called")
	}
	e.cancel("rr1", "ops", "")
	select {
	case doc := <-seen:
		if doc.ID != "rr1" || doc.By != "ops" {
			t.Errorf("cancellation seen by the remote handler %+v", doc)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("remote handler saw no cancellation")
	}
	e.wantCancelled("rr1", "ops", "")
}
