package producer_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/spoolq/spool/producer"
	spool "github.com/spoolq/spool/shared"
	"github.com/spoolq/spool/streams"
	"github.com/spoolq/spool/streams/embedded"
	"github.com/spoolq/spool/streams/streamstest"
)

// putResult writes a result document as a consumer would.
func (e *env) putResult(t testing.TB, r spool.Result) {
	t.Helper()
	ctx := ctxFor(t)
	kv, err := e.js.KeyValue(ctx, e.names.ResultsBucket())
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, r.ID, b); err != nil {
		t.Fatal(err)
	}
}

func TestResult(t *testing.T) {
	t.Parallel()
	e := startEnv(t)
	ctx := ctxFor(t)
	if _, err := e.client.Result(ctx, "nope"); !errors.Is(err, producer.ErrTaskNotFound) {
		t.Fatalf("missing result: %v", err)
	}
	if _, err := e.client.Result(ctx, "bad id"); !errors.Is(err, producer.ErrInvalidID) {
		t.Fatalf("bad id: %v", err)
	}
	e.putResult(t, spool.Result{ID: "r1", Type: "a", Priority: spool.High, State: spool.StateCompleted,
		Attempts: 1, Result: json.RawMessage(`{"ok":true}`), EnqueuedAt: time.Now()})
	r, err := e.client.Result(ctx, "r1")
	if err != nil {
		t.Fatal(err)
	}
	if r.State != spool.StateCompleted || r.Priority != spool.High || string(r.Result) != `{"ok":true}` {
		t.Fatalf("result %+v", r)
	}
}

func TestWaitReturnsAtTerminalState(t *testing.T) {
	t.Parallel()
	e := startEnv(t)
	ctx := ctxFor(t)
	done := make(chan error, 1)
	var got spool.Result
	go func() {
		var err error
		got, err = e.client.Wait(ctx, "w1")
		done <- err
	}()
	for _, st := range []spool.State{spool.StatePending, spool.StateProcessing, spool.StateRetrying} {
		e.putResult(t, spool.Result{ID: "w1", State: st})
		select {
		case err := <-done:
			t.Fatalf("Wait returned at state %s: %v", st, err)
		default:
		}
	}
	e.putResult(t, spool.Result{ID: "w1", State: spool.StateDead, Error: "boom", Reason: spool.ReasonError, Attempts: 4})
	// Seen on the key's subject, not at the next re-read.
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(producer.WaitRecheck - time.Second):
		t.Fatal("Wait did not return after the terminal state")
	}
	if got.State != spool.StateDead || got.Error != "boom" || got.Attempts != 4 {
		t.Fatalf("Wait returned %+v", got)
	}

	// A document already terminal returns at once.
	r, err := e.client.Wait(ctx, "w1")
	if err != nil || r.State != spool.StateDead {
		t.Fatalf("second Wait: %+v, %v", r, err)
	}
}

// Wait waits as long as its context allows, so a context without a
// deadline is valid (the benchmark harness waits that way).
func TestWaitWithoutDeadline(t *testing.T) {
	t.Parallel()
	e := startEnv(t)
	e.putResult(t, spool.Result{ID: "nodeadline", State: spool.StateCompleted})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r, err := e.client.Wait(ctx, "nodeadline")
	if err != nil || r.State != spool.StateCompleted {
		t.Fatalf("Wait without a deadline: %+v, %v", r, err)
	}
}

func TestWaitEndsWithItsContext(t *testing.T) {
	t.Parallel()
	e := startEnv(t)
	e.putResult(t, spool.Result{ID: "slow", State: spool.StateProcessing})
	ctx, cancel := context.WithTimeout(ctxFor(t), 300*time.Millisecond)
	defer cancel()
	r, err := e.client.Wait(ctx, "slow")
	if !errors.Is(err, context.DeadlineExceeded) || r.State != spool.StateProcessing {
		t.Fatalf("want the last state and DeadlineExceeded, got %+v, %v", r, err)
	}
}

// The watch uses an ordered consumer; make sure none is left behind.
func TestWaitLeavesNoConsumer(t *testing.T) {
	t.Parallel()
	e := startEnv(t)
	ctx := ctxFor(t)
	e.putResult(t, spool.Result{ID: "x", State: spool.StateCompleted})
	if _, err := e.client.Wait(ctx, "x"); err != nil {
		t.Fatal(err)
	}
	streamstest.WaitFor(t, 5*time.Second, func() error {
		s, err := e.js.Stream(ctx, "KV_"+e.names.ResultsBucket())
		if err != nil {
			return err
		}
		if n := s.CachedInfo().State.Consumers; n != 0 {
			return errorf("%d consumers", n)
		}
		return nil
	})
}

// nanResult is a result document as a worker in another language may
// store it: its JSON encoder wrote NaN, which RFC 8259 does not allow.
const nanResult = `{"id":"%s","type":"a","priority":"normal","state":"completed","attempts":1,"result":NaN,"enqueued_at":"2026-01-01T00:00:00Z"}`

// A stored result document that is not JSON is reported as an invalid
// document naming the task, the field and the byte offset, by Result,
// Wait and Cancel alike, and not as an outage.
func TestResultInvalidDocument(t *testing.T) {
	t.Parallel()
	e := startEnv(t)
	ctx := ctxFor(t)
	kv, err := e.js.KeyValue(ctx, e.names.ResultsBucket())
	if err != nil {
		t.Fatal(err)
	}
	doc := fmt.Sprintf(nanResult, "nan1")
	if _, err := kv.PutString(ctx, "nan1", doc); err != nil {
		t.Fatal(err)
	}
	// The decoder stops after reading the N.
	offset := int64(strings.Index(doc, "NaN") + 1)
	check := func(what string, err error) {
		t.Helper()
		var de *spool.DocumentError
		if !errors.Is(err, producer.ErrInvalidDocument) || !errors.As(err, &de) {
			t.Fatalf("%s: %v, want a *spool.DocumentError", what, err)
		}
		if de.Key != "nan1" || de.Field != "result" || de.Offset != offset {
			t.Errorf("%s: key %q field %q offset %d, want nan1, result, %d", what, de.Key, de.Field, de.Offset, offset)
		}
		if msg := err.Error(); !strings.Contains(msg, `result document "nan1"`) || !strings.Contains(msg, `field "result"`) {
			t.Errorf("%s: message %q names neither the document nor the field", what, msg)
		}
	}
	_, err = e.client.Result(ctx, "nan1")
	check("Result", err)
	_, err = e.client.Wait(ctx, "nan1")
	check("Wait", err)
	_, err = e.client.Cancel(ctx, "nan1")
	check("Cancel", err)
}

// TestWaitThroughLostServer opens a Wait without a deadline while the
// client's only server is down for longer than the client's timeout, as
// when the node a client is connected to is lost in an election: the Wait
// subscribes, rides out the reconnect and answers with the result written
// after the server came back.
func TestWaitThroughLostServer(t *testing.T) {
	t.Parallel()
	ports, err := embedded.FreePorts(1)
	if err != nil {
		t.Fatal(err)
	}
	opts := embedded.Options{Port: ports[0], StoreDir: t.TempDir()}
	e := streamstest.StartWith(t, opts, streams.Settings{})
	nc := e.Connect(t)
	const timeout = 100 * time.Millisecond
	client, err := producer.New(nc, producer.WithTimeout(timeout), producer.WithLogger(testLogger(t)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(client.Close)
	e.Server.Shutdown()
	e.Server.WaitForShutdown()
	streamstest.WaitFor(t, 10*time.Second, func() error {
		if !nc.IsReconnecting() {
			return errors.New("the client has not noticed the server is gone")
		}
		return nil
	})
	subs := nc.NumSubscriptions()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	type waited struct {
		r   spool.Result
		err error
	}
	done := make(chan waited, 1)
	go func() {
		r, err := client.Wait(ctx, "through-restart")
		done <- waited{r, err}
	}()
	streamstest.WaitFor(t, 10*time.Second, func() error {
		if nc.NumSubscriptions() == subs {
			return errors.New("Wait has not subscribed yet")
		}
		return nil
	})
	// The server stays down for several of the client's timeouts: what
	// the election of a lost node's groups takes, scaled down.
	<-time.After(5 * timeout)
	s, err := embedded.Start(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	(&env{js: e.JS, names: e.Names}).putResult(t, spool.Result{ID: "through-restart", State: spool.StateCompleted})
	select {
	case w := <-done:
		if w.err != nil || w.r.State != spool.StateCompleted {
			t.Fatalf("Wait through a lost server: %+v, %v", w.r, w.err)
		}
	case <-time.After(2 * producer.WaitRecheck):
		t.Fatal("Wait did not answer after the server came back")
	}
}
