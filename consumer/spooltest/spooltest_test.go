package spooltest_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"go.uber.org/goleak"

	"github.com/spoolq/spool/consumer"
	"github.com/spoolq/spool/consumer/spooltest"
	spool "github.com/spoolq/spool/shared"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func publish(t *testing.T, srv *spooltest.Server, subject, id string) {
	t.Helper()
	m := nats.NewMsg(subject)
	m.Header.Set(spool.HeaderMsgID, id)
	if _, err := srv.JS.PublishMsg(t.Context(), m); err != nil {
		t.Fatal(err)
	}
}

// Run, WaitDrained, Result, DeadLetters and Reset against a real server:
// one task completes, one fails for good, and Reset empties everything.
func TestServer(t *testing.T) {
	t.Parallel()
	srv := spooltest.Start(t)
	mux := consumer.NewMux()
	mux.HandleFunc("ok", func(context.Context, *consumer.Task) ([]byte, error) { return []byte(`{"ok":true}`), nil })
	mux.HandleFunc("bad", func(context.Context, *consumer.Task) ([]byte, error) {
		return nil, consumer.Permanent(errors.New("refused"))
	})

	// Nothing is running yet: the queue is not drained.
	publish(t, srv, "spool.tasks.high.ok", "t-ok")
	publish(t, srv, "spool.tasks.low.bad", "t-bad")
	if done, err := srv.Drained(t.Context()); err != nil || done {
		t.Fatalf("drained before any worker ran: %v, %v", done, err)
	}
	srv.Run(t, mux)
	srv.WaitDrained(t, 10*time.Second)
	if r := srv.Result(t, "t-ok"); r.State != spool.StateCompleted || string(r.Result) != `{"ok":true}` {
		t.Errorf("t-ok: %+v", r)
	}
	if r := srv.Result(t, "t-bad"); r.State != spool.StateDead || r.Reason != spool.ReasonPermanent {
		t.Errorf("t-bad: %+v", r)
	}
	if n := srv.DeadLetters(t); n != 1 {
		t.Errorf("%d dead letters, want 1", n)
	}

	srv.Reset(t)
	if n := srv.DeadLetters(t); n != 0 {
		t.Errorf("%d dead letters after Reset", n)
	}
	kv, err := srv.JS.KeyValue(t.Context(), srv.Names.ResultsBucket())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Get(t.Context(), "t-ok"); err == nil {
		t.Error("a result survived Reset")
	}
	// The worker still serves after a reset.
	publish(t, srv, "spool.tasks.normal.ok", "t-again")
	srv.WaitDrained(t, 10*time.Second)
	if r := srv.Result(t, "t-again"); r.State != spool.StateCompleted {
		t.Errorf("t-again: %+v", r)
	}
}
