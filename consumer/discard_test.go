package consumer_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/spoolq/spool/consumer"
	spool "github.com/spoolq/spool/shared"
	"github.com/spoolq/spool/streams"
	"github.com/spoolq/spool/streams/streamstest"
)

// A task that says Spool-Result: discard completes without a result
// document: its key holds only the marker that it completed, while its
// completed event (without the output) and the worker's counters see it as
// any task; a task beside it keeps its document.
func TestDiscardedResult(t *testing.T) {
	t.Parallel()
	e := newEnv(t, streams.Settings{})
	events, err := e.nc.SubscribeSync(e.names.Prefix() + ".events.completed.>")
	if err != nil {
		t.Fatal(err)
	}
	if err := e.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	mux := consumer.NewMux()
	mux.HandleFunc("report.build", func(context.Context, *consumer.Task) ([]byte, error) {
		return []byte(`{"pages":12}`), nil
	})
	w := e.worker(mux)
	e.publishID(spool.Normal, "report.build", "kept-1", nil, nil)
	e.publishID(spool.Normal, "report.build", "gone-1", nil, map[string]string{spool.HeaderResult: string(spool.DiscardResult)})

	kept := e.waitResult("kept-1", spool.StateCompleted, 10*time.Second)
	if string(kept.Result) != `{"pages":12}` {
		t.Errorf("kept result %+v", kept)
	}
	streamstest.WaitFor(t, 10*time.Second, func() error {
		if n := w.Stats().Types["report.build"].Completed; n != 2 {
			return fmt.Errorf("%d completed, want 2", n)
		}
		if n := e.taskMsgs(); n != 0 {
			return fmt.Errorf("%d tasks left in the stream", n)
		}
		return nil
	})
	if doc, ok := e.result("gone-1"); ok {
		t.Fatalf("a discarded result has a document: %+v", doc)
	}
	if m := e.lastResultMsg("gone-1"); m == nil || !spool.IsDiscardedMarker(m.Header) || len(m.Data) != 0 {
		t.Fatalf("the key of a discarded result holds %+v, want the marker", m)
	}

	heard := map[string]spool.Event{}
	for len(heard) < 2 {
		m, err := events.NextMsg(10 * time.Second)
		if err != nil {
			t.Fatalf("completed events heard %v: %v", heard, err)
		}
		var ev spool.Event
		if err := json.Unmarshal(m.Data, &ev); err != nil {
			t.Fatal(err)
		}
		heard[ev.Task.ID] = ev
	}
	if ev := heard["gone-1"]; !ev.Task.ResultDiscarded || len(ev.Task.Result) != 0 || ev.Task.State != spool.StateCompleted || ev.Task.FinishedAt == nil {
		t.Errorf("completed event of the discarded result: %+v", ev.Task)
	}
	if ev := heard["kept-1"]; ev.Task.ResultDiscarded || string(ev.Task.Result) != `{"pages":12}` {
		t.Errorf("completed event of the kept result: %+v", ev.Task)
	}
}

// A task whose result is discarded keeps its failures: a failed attempt
// writes retrying and the retry runs, its completion then replacing the
// retrying state with the marker; a task that runs out of attempts is
// dead-lettered with its reason and keeps its dead document.
func TestDiscardedResultFailures(t *testing.T) {
	t.Parallel()
	e := newEnv(t, streams.Settings{})
	discard := map[string]string{spool.HeaderResult: string(spool.DiscardResult)}
	writes := e.resultWrites("flaky-1")
	mux := consumer.NewMux()
	mux.HandleFunc("flaky", func(_ context.Context, task *consumer.Task) ([]byte, error) {
		if task.Attempt < 2 {
			return nil, errors.New("not yet")
		}
		return []byte("done"), nil
	})
	mux.HandleFunc("doomed", func(context.Context, *consumer.Task) ([]byte, error) {
		return nil, errors.New("smtp 451")
	})
	w := e.worker(mux, consumer.WithRetry(20*time.Millisecond, 20*time.Millisecond, 1))
	e.publishID(spool.Normal, "flaky", "flaky-1", nil, discard)
	e.publishID(spool.Normal, "doomed", "doomed-1", []byte("body"), discard)

	dead := e.waitResult("doomed-1", spool.StateDead, 10*time.Second)
	if dead.Reason != spool.ReasonError || dead.Attempts != 2 || dead.Error != "smtp 451" {
		t.Errorf("dead document %+v, want reason error after 2 attempts", dead)
	}
	dlq, err := e.js.Stream(testCtx(t), e.names.DLQStream())
	if err != nil {
		t.Fatal(err)
	}
	subject, err := e.names.DLQSubject(spool.Normal, "doomed")
	if err != nil {
		t.Fatal(err)
	}
	letter, err := dlq.GetLastMsgForSubject(testCtx(t), subject)
	if err != nil {
		t.Fatalf("dead letter: %v", err)
	}
	if h := letter.Header; h.Get(spool.HeaderReason) != string(spool.ReasonError) || h.Get(spool.HeaderAttempts) != "2" ||
		h.Get(spool.HeaderResult) != string(spool.DiscardResult) || string(letter.Data) != "body" {
		t.Errorf("dead letter %v %q", h, letter.Data)
	}

	// The retry's state, then the marker over it.
	var states []string
	for len(states) < 2 {
		m, err := writes.NextMsg(10 * time.Second)
		if err != nil {
			t.Fatalf("writes of flaky-1 %v: %v", states, err)
		}
		if spool.IsDiscardedMarker(m.Header) {
			states = append(states, "marker")
			continue
		}
		var doc spool.Result
		if err := json.Unmarshal(m.Data, &doc); err != nil {
			t.Fatal(err)
		}
		states = append(states, string(doc.State))
	}
	if states[0] != string(spool.StateRetrying) || states[1] != "marker" {
		t.Errorf("writes of flaky-1: %v, want retrying then the marker", states)
	}
	streamstest.WaitFor(t, 10*time.Second, func() error {
		c := w.Stats().Types["flaky"]
		if c.Completed != 1 || c.Retried != 1 {
			return fmt.Errorf("flaky counters %+v, want 1 completed and 1 retried", c)
		}
		return nil
	})
	if doc, ok := e.result("flaky-1"); ok {
		t.Errorf("flaky-1 completed with a document: %+v", doc)
	}
}

// WithDiscardResults discards the results of the types it names, by
// pattern; a task's own Spool-Result wins either way. A task with a unique
// key, whose result is written before its key is released rather than
// through the completion pipeline, stores the marker the same way.
func TestDiscardResultsByType(t *testing.T) {
	t.Parallel()
	e := newEnv(t, streams.Settings{})
	mux := consumer.NewMux()
	for _, typ := range []string{"metrics.push", "report.build"} {
		mux.HandleFunc(typ, func(context.Context, *consumer.Task) ([]byte, error) { return []byte(`"ok"`), nil })
	}
	e.worker(mux, consumer.WithDiscardResults("metrics.*"))
	unique := map[string]string{spool.HeaderUniqueKey: "metrics-unique", spool.HeaderUniqueTTL: "1h"}
	cases := []struct {
		id, typ string
		policy  spool.ResultPolicy
		kept    bool
		extra   map[string]string
	}{
		{"by-type", "metrics.push", "", false, nil},
		{"kept-by-task", "metrics.push", spool.KeepResult, true, nil},
		{"other-type", "report.build", "", true, nil},
		{"discarded-by-task", "report.build", spool.DiscardResult, false, nil},
		{"unique", "metrics.push", "", false, unique},
	}
	// The unique key as the producer claims it, for the worker to release.
	uniq, err := e.js.KeyValue(testCtx(t), e.names.UniqueBucket())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := uniq.Put(testCtx(t), spool.UniqueKVKey("metrics-unique"), []byte("unique")); err != nil {
		t.Fatal(err)
	}
	for _, c := range cases {
		h := maps.Clone(c.extra)
		if h == nil {
			h = map[string]string{}
		}
		if c.policy != "" {
			h[spool.HeaderResult] = string(c.policy)
		}
		e.publishID(spool.Normal, c.typ, c.id, nil, h)
	}
	for _, c := range cases {
		streamstest.WaitFor(t, 10*time.Second, func() error {
			m := e.lastResultMsg(c.id)
			switch {
			case m == nil:
				return fmt.Errorf("%s: nothing stored yet", c.id)
			case spool.IsDiscardedMarker(m.Header):
				if c.kept {
					t.Fatalf("%s: result discarded, want it kept", c.id)
				}
				return nil
			}
			var doc spool.Result
			if err := json.Unmarshal(m.Data, &doc); err != nil {
				t.Fatalf("%s: %v", c.id, err)
			}
			if doc.State != spool.StateCompleted {
				return fmt.Errorf("%s: %s", c.id, doc.State)
			}
			if !c.kept {
				t.Fatalf("%s: result kept (%+v), want it discarded", c.id, doc)
			}
			return nil
		})
	}
	streamstest.WaitFor(t, 10*time.Second, func() error {
		if _, err := uniq.Get(testCtx(t), spool.UniqueKVKey("metrics-unique")); !errors.Is(err, jetstream.ErrKeyNotFound) {
			return fmt.Errorf("the unique key is still held (%v)", err)
		}
		return nil
	})
	if _, err := consumer.New(e.nc, mux, consumer.WithDiscardResults("metrics.>.x")); !errors.Is(err, consumer.ErrInvalidOption) {
		t.Errorf("a bad pattern: %v, want ErrInvalidOption", err)
	}
}

// A redelivered task whose result is discarded runs at once: it has no
// completed outcome an earlier attempt could still be storing, so the
// quarter of the AckWait a redelivery otherwise waits for one is not
// spent. A task that keeps its result, redelivered beside it, waits.
func TestDiscardedResultRedeliveryRunsAtOnce(t *testing.T) {
	t.Parallel()
	const ackWait = 4 * time.Second
	// A redelivery waits for an earlier attempt on a replicated stream
	// only (admission.awaitOutcome): the test needs a cluster.
	e := newClusterEnv(t, streams.Settings{Consumers: streams.ConsumersByPriority, AckWait: ackWait})
	e.publishID(spool.Normal, "job", "keeps", nil, nil)
	e.publishID(spool.Normal, "job", "discards", nil, map[string]string{spool.HeaderResult: string(spool.DiscardResult)})
	// Earlier attempts that never settle (their worker was killed): both
	// come back once their AckWait ends.
	e.fetchOne(spool.Normal)
	e.fetchOne(spool.Normal)

	var mu sync.Mutex
	started := map[string]time.Time{}
	mux := consumer.NewMux()
	mux.HandleFunc("job", func(_ context.Context, task *consumer.Task) ([]byte, error) {
		mu.Lock()
		defer mu.Unlock()
		if _, ok := started[task.ID]; !ok {
			started[task.ID] = time.Now()
		}
		return nil, nil
	})
	e.worker(mux)
	streamstest.WaitFor(t, 30*time.Second, func() error {
		mu.Lock()
		defer mu.Unlock()
		if len(started) != 2 {
			return fmt.Errorf("started %v", started)
		}
		return nil
	})
	mu.Lock()
	defer mu.Unlock()
	// Both came back within milliseconds of each other; the one that
	// waits for an outcome runs a quarter of the AckWait (1s) later.
	if lag := started["keeps"].Sub(started["discards"]); lag < ackWait/8 {
		t.Errorf("the task that keeps its result ran %s after the one that discards it, want at least %s: the discarding one waited for an outcome", lag, ackWait/8)
	}
}

// lastResultMsg is the last message on task id's key in the results
// bucket, a delete included; nil when there is none.
func (e *env) lastResultMsg(id string) *jetstream.RawStreamMsg {
	e.t.Helper()
	s, err := e.js.Stream(testCtx(e.t), "KV_"+e.names.ResultsBucket())
	if err != nil {
		e.t.Fatal(err)
	}
	m, err := s.GetLastMsgForSubject(testCtx(e.t), e.names.ResultSubject(id))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil
	}
	if err != nil {
		e.t.Fatal(err)
	}
	return m
}
