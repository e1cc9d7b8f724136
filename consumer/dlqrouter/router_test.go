package dlqrouter_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/spoolq/spool/consumer/dlqrouter"
	spool "github.com/spoolq/spool/shared"
	"github.com/spoolq/spool/shared/limits"
	"github.com/spoolq/spool/shared/workflow"
	"github.com/spoolq/spool/streams"
	"github.com/spoolq/spool/streams/dlq"
	"github.com/spoolq/spool/streams/streamstest"
)

// routerEnv is one embedded server with the Spool topology provisioned for
// fast crashes: two deliveries, one second of ack wait.
type routerEnv struct {
	url   string
	nc    *nats.Conn
	js    jetstream.JetStream
	names spool.Names
	topo  streams.Topology
}

func newRouterEnv(t *testing.T) *routerEnv {
	t.Helper()
	e := streamstest.Start(t, streams.Settings{MaxDeliver: 2, AckWait: time.Second})
	return &routerEnv{url: e.URL, nc: e.NC, js: e.JS, names: e.Names, topo: e.Topology}
}

// routerCtx bounds a test's I/O.
func routerCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 25*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// routerWaitFor polls cond until it holds, failing the test at the
// deadline with the last state cond reported.
func routerWaitFor(t *testing.T, timeout time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	streamstest.WaitFor(t, timeout, func() error {
		if ok, state := cond(); !ok {
			return fmt.Errorf("waiting for %s; last state: %s", what, state)
		}
		return nil
	})
}

// startRouter starts a router stopped (and checked) when t ends.
func (e *routerEnv) startRouter(t *testing.T, opts ...dlqrouter.Option) *dlqrouter.Router {
	t.Helper()
	opts = append([]dlqrouter.Option{
		dlqrouter.WithNames(e.names),
		dlqrouter.WithLogger(streamstest.Logger(t)),
		dlqrouter.WithFetchWait(500 * time.Millisecond),
		dlqrouter.WithRetryDelay(50 * time.Millisecond),
	}, opts...)
	r, err := dlqrouter.New(e.nc, opts...)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Start(routerCtx(t)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(t.Context()), 10*time.Second)
		defer cancel()
		if err := r.Stop(ctx); err != nil {
			t.Errorf("stopping router: %v", err)
		}
	})
	return r
}

// crashWorker pulls tasks of priority p and never settles them, as a worker
// that dies mid-task would, keeping a pull outstanding so the server emits
// the MAX_DELIVERIES advisory. It stops when t ends.
func (e *routerEnv) crashWorker(t *testing.T, p spool.Priority) {
	t.Helper()
	cons, err := e.js.Consumer(routerCtx(t), e.names.TaskStream(), e.names.Consumer(p))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.WithoutCancel(t.Context()))
	var wg sync.WaitGroup
	wg.Go(func() {
		for ctx.Err() == nil {
			fctx, fcancel := context.WithTimeout(ctx, 500*time.Millisecond)
			if b, err := cons.Fetch(16, jetstream.FetchContext(fctx)); err == nil {
				for range b.Messages() { // received, never acked: the worker "crashed"
				}
			}
			fcancel()
		}
	})
	t.Cleanup(func() { cancel(); wg.Wait() })
}

// publishTask publishes a task and returns its stream sequence.
func (e *routerEnv) publishTask(t *testing.T, subject string, h nats.Header, body []byte) uint64 {
	t.Helper()
	ack, err := e.js.PublishMsg(routerCtx(t), &nats.Msg{Subject: subject, Header: h, Data: body})
	if err != nil {
		t.Fatalf("publishing task to %s: %v", subject, err)
	}
	return ack.Sequence
}

// publishAdvisory publishes a MAX_DELIVERIES advisory as the server would.
func (e *routerEnv) publishAdvisory(t *testing.T, seq, deliveries uint64) {
	t.Helper()
	adv := map[string]any{
		"type":       "io.nats.jetstream.advisory.v1.max_deliver",
		"id":         "test-" + strconv.FormatUint(seq, 10),
		"timestamp":  time.Now().UTC(),
		"stream":     e.names.TaskStream(),
		"consumer":   e.names.Consumer(spool.Normal),
		"stream_seq": seq,
		"deliveries": deliveries,
	}
	b, err := json.Marshal(adv)
	if err != nil {
		t.Fatal(err)
	}
	e.publishRawAdvisory(t, b)
}

func (e *routerEnv) publishRawAdvisory(t *testing.T, body []byte) {
	t.Helper()
	subject := "$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES." + e.names.TaskStream() + "." + e.names.Consumer(spool.Normal)
	if _, err := e.js.Publish(routerCtx(t), subject, body); err != nil {
		t.Fatalf("publishing advisory: %v", err)
	}
}

// streamMsgs returns every message stored in stream, in order.
func (e *routerEnv) streamMsgs(t *testing.T, stream string) []*jetstream.RawStreamMsg {
	t.Helper()
	ctx := routerCtx(t)
	s, err := e.js.Stream(ctx, stream)
	if err != nil {
		t.Fatal(err)
	}
	st := s.CachedInfo().State
	var out []*jetstream.RawStreamMsg
	if st.Msgs == 0 {
		return nil
	}
	for seq := st.FirstSeq; seq <= st.LastSeq; seq++ {
		m, err := s.GetMsg(ctx, seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			t.Fatalf("reading %s seq %d: %v", stream, seq, err)
		}
		out = append(out, m)
	}
	return out
}

// msgCount returns how many messages stream holds.
func (e *routerEnv) msgCount(t *testing.T, stream string) uint64 {
	t.Helper()
	s, err := e.js.Stream(routerCtx(t), stream)
	if err != nil {
		t.Fatal(err)
	}
	return s.CachedInfo().State.Msgs
}

// idle reports whether the router consumer has nothing pending or unacked.
func (e *routerEnv) routerIdle(t *testing.T) (bool, string) {
	t.Helper()
	c, err := e.js.Consumer(routerCtx(t), e.names.AdvisoryStream(), e.names.RouterConsumer())
	if err != nil {
		t.Fatal(err)
	}
	info := c.CachedInfo()
	advisories := e.msgCount(t, e.names.AdvisoryStream())
	return info.NumPending == 0 && info.NumAckPending == 0 && advisories == 0,
		fmt.Sprintf("pending %d, ack pending %d, advisories stored %d", info.NumPending, info.NumAckPending, advisories)
}

func (e *routerEnv) result(t *testing.T, id string) (spool.Result, error) {
	t.Helper()
	kv, err := e.js.KeyValue(routerCtx(t), e.names.ResultsBucket())
	if err != nil {
		t.Fatal(err)
	}
	var doc spool.Result
	entry, err := kv.Get(routerCtx(t), id)
	if err != nil {
		return doc, err
	}
	if err := json.Unmarshal(entry.Value(), &doc); err != nil {
		t.Fatalf("result of %s: %v", id, err)
	}
	return doc, nil
}

func TestRouterDeadLettersCrashedTask(t *testing.T) {
	t.Parallel()
	e := newRouterEnv(t)
	ctx := routerCtx(t)

	subject, err := e.names.TaskSubject(spool.Normal, "email.send")
	if err != nil {
		t.Fatal(err)
	}
	h := nats.Header{}
	h.Set(spool.HeaderMsgID, "task-crash-1")
	h.Set(spool.HeaderTaskID, "task-crash-1")
	h.Set(spool.HeaderTraceParent, "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
	h.Set("X-Tenant", "acme")
	h.Set(spool.HeaderUniqueKey, "welcome:ada")
	h.Set(spool.HeaderUniqueTTL, "1h")
	body := []byte(`{"to":"ada@example.com"}`)
	unique, err := e.js.KeyValue(ctx, e.names.UniqueBucket())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := unique.Create(ctx, spool.UniqueKVKey("welcome:ada"), []byte("task-crash-1"), jetstream.KeyTTL(time.Hour)); err != nil {
		t.Fatal(err)
	}
	seq := e.publishTask(t, subject, h, body)

	e.crashWorker(t, spool.Normal)
	r := e.startRouter(t, dlqrouter.WithWorker("router-under-test"))

	routerWaitFor(t, 20*time.Second, "the task in the DLQ", func() (bool, string) {
		n := e.msgCount(t, e.names.DLQStream())
		return n == 1, fmt.Sprintf("%d dead letters", n)
	})
	routerWaitFor(t, 10*time.Second, "the advisory acknowledged", func() (bool, string) { return e.routerIdle(t) })

	dead := e.streamMsgs(t, e.names.DLQStream())[0]
	if want := "spool.dlq.normal.email.send"; dead.Subject != want {
		t.Errorf("dead letter subject = %q, want %q", dead.Subject, want)
	}
	if string(dead.Data) != string(body) {
		t.Errorf("dead letter body = %q, want %q", dead.Data, body)
	}
	wantHeaders := map[string]string{
		spool.HeaderReason:          "max_deliver",
		spool.HeaderOriginalSubject: subject,
		spool.HeaderOriginalSeq:     strconv.FormatUint(seq, 10),
		spool.HeaderAttempts:        "2",
		spool.HeaderError:           "deliveries exhausted without a verdict (worker crashed or timed out 2 times)",
		spool.HeaderTaskID:          "task-crash-1",
		spool.HeaderTraceParent:     "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
		"X-Tenant":                  "acme",
		spool.HeaderMsgID:           "dlq-SPOOL_TASKS-" + strconv.FormatUint(seq, 10),
	}
	for k, v := range wantHeaders {
		if got := dead.Header.Values(k); len(got) != 1 || got[0] != v {
			t.Errorf("dead letter header %s = %q, want [%q]", k, got, v)
		}
	}
	if _, err := time.Parse(time.RFC3339Nano, dead.Header.Get(spool.HeaderFailedAt)); err != nil {
		t.Errorf("Spool-Failed-At %q: %v", dead.Header.Get(spool.HeaderFailedAt), err)
	}

	tasks, err := e.js.Stream(ctx, e.names.TaskStream())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tasks.GetMsg(ctx, seq); !errors.Is(err, jetstream.ErrMsgNotFound) {
		t.Errorf("task seq %d still in %s (err %v)", seq, e.names.TaskStream(), err)
	}

	doc, err := e.result(t, "task-crash-1")
	if err != nil {
		t.Fatalf("result document: %v", err)
	}
	if doc.State != spool.StateDead || doc.Reason != spool.ReasonMaxDeliver || doc.Attempts != 2 ||
		doc.Type != "email.send" || doc.Priority != spool.Normal || doc.Worker != "router-under-test" {
		t.Errorf("result document = %+v, want dead/max_deliver, 2 attempts, email.send, normal, router-under-test", doc)
	}
	if _, err := unique.Get(ctx, spool.UniqueKVKey("welcome:ada")); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Errorf("unique key of the dead task not released: %v", err)
	}
	if st := r.Stats(); st.Routed != 1 || st.Bad != 0 {
		t.Errorf("stats = %+v, want 1 routed, 0 bad", st)
	}
}

// A router that died after publishing the dead letter but before deleting
// the task leaves both; the next one finishes the job without a second
// dead letter.
func TestRouterFinishesPartialRoute(t *testing.T) {
	t.Parallel()
	e := newRouterEnv(t)
	ctx := routerCtx(t)
	h := nats.Header{}
	h.Set(spool.HeaderTaskID, "half-1")
	seq := e.publishTask(t, "spool.tasks.normal.import", h, []byte("rows"))
	tasks, err := e.js.Stream(ctx, e.names.TaskStream())
	if err != nil {
		t.Fatal(err)
	}
	raw, err := tasks.GetMsg(ctx, seq)
	if err != nil {
		t.Fatal(err)
	}
	m := dlq.MessageFromRaw(raw, spool.ReasonMaxDeliver, "earlier router", 2)
	if err := dlq.Publish(ctx, e.js, e.names, m); err != nil {
		t.Fatal(err)
	}

	r := e.startRouter(t)
	e.publishAdvisory(t, seq, 2)
	routerWaitFor(t, 10*time.Second, "the task removed", func() (bool, string) {
		idle, state := e.routerIdle(t)
		left := e.msgCount(t, e.names.TaskStream())
		return idle && left == 0, fmt.Sprintf("%s, %d tasks left, stats %+v", state, left, r.Stats())
	})
	dead := e.streamMsgs(t, e.names.DLQStream())
	if len(dead) != 1 || dead[0].Header.Get(spool.HeaderError) != "earlier router" {
		t.Errorf("dead letters = %d (%v), want only the earlier router's", len(dead), dead)
	}
	if doc, err := e.result(t, "half-1"); err != nil || doc.State != spool.StateDead {
		t.Errorf("result = %+v, %v; want dead", doc, err)
	}
}

func TestRouterIsIdempotentAcrossRouters(t *testing.T) {
	t.Parallel()
	e := newRouterEnv(t)
	const n = 6
	seqs := map[uint64]bool{}
	for i := range n {
		h := nats.Header{}
		h.Set(spool.HeaderTaskID, fmt.Sprintf("task-%d", i))
		seqs[e.publishTask(t, "spool.tasks.normal.report.build", h, []byte(strconv.Itoa(i)))] = true
	}
	e.crashWorker(t, spool.Normal)
	routerWaitFor(t, 20*time.Second, "the server's advisories", func() (bool, string) {
		got := e.msgCount(t, e.names.AdvisoryStream())
		return got == n, fmt.Sprintf("%d advisories stored", got)
	})
	// A second advisory for each task makes the two routers race on it.
	for seq := range seqs {
		e.publishAdvisory(t, seq, 2)
	}
	r1 := e.startRouter(t, dlqrouter.WithBatch(2))
	r2 := e.startRouter(t, dlqrouter.WithBatch(2))

	routerWaitFor(t, 20*time.Second, "every task out of the task stream and every advisory handled", func() (bool, string) {
		left := e.msgCount(t, e.names.TaskStream())
		idle, state := e.routerIdle(t)
		// The server's advisory and ours for each task: 2n in all.
		handled := r1.Stats().Routed + r1.Stats().Gone + r2.Stats().Routed + r2.Stats().Gone
		return left == 0 && idle && handled >= 2*n, fmt.Sprintf("%d tasks left, %d advisories handled, %s", left, handled, state)
	})

	dead := e.streamMsgs(t, e.names.DLQStream())
	if len(dead) != n {
		t.Errorf("%d dead letters, want %d", len(dead), n)
	}
	got := map[uint64]int{}
	for _, m := range dead {
		seq, err := strconv.ParseUint(m.Header.Get(spool.HeaderOriginalSeq), 10, 64)
		if err != nil || !seqs[seq] {
			t.Errorf("dead letter with unexpected Spool-Original-Seq %q", m.Header.Get(spool.HeaderOriginalSeq))
		}
		got[seq]++
	}
	for seq := range seqs {
		if got[seq] != 1 {
			t.Errorf("task seq %d is %d times in the DLQ, want once", seq, got[seq])
		}
	}
	t.Logf("router 1: %+v, router 2: %+v", r1.Stats(), r2.Stats())
}

func TestRouterAcksAdvisoryOfGoneTask(t *testing.T) {
	t.Parallel()
	e := newRouterEnv(t)
	r := e.startRouter(t)
	e.publishAdvisory(t, 4242, 2)

	routerWaitFor(t, 10*time.Second, "the advisory acknowledged", func() (bool, string) {
		idle, state := e.routerIdle(t)
		return idle && r.Stats().Gone == 1, fmt.Sprintf("%s, stats %+v", state, r.Stats())
	})
	if n := e.msgCount(t, e.names.DLQStream()); n != 0 {
		t.Errorf("%d dead letters, want none", n)
	}
	if st := r.Stats(); st.Routed != 0 || st.Failed != 0 {
		t.Errorf("stats = %+v, want only 1 gone", st)
	}
}

func TestRouterDropsBadAdvisories(t *testing.T) {
	t.Parallel()
	e := newRouterEnv(t)
	r := e.startRouter(t)
	seq := e.publishTask(t, "spool.tasks.low.cleanup", nil, []byte("x"))
	e.publishRawAdvisory(t, []byte("not json"))
	e.publishRawAdvisory(t, []byte(`{"type":"io.nats.jetstream.advisory.v1.max_deliver","stream":"SPOOL_TASKS"}`)) // no stream_seq
	e.publishRawAdvisory(t, []byte(`{"type":"io.nats.jetstream.advisory.v1.max_deliver","stream":"OTHER","stream_seq":1}`))
	e.publishAdvisory(t, seq, 3) // a good one after the bad ones is still handled

	routerWaitFor(t, 10*time.Second, "all advisories handled", func() (bool, string) {
		idle, state := e.routerIdle(t)
		st := r.Stats()
		return idle && st.Bad == 3 && st.Routed == 1, fmt.Sprintf("%s, stats %+v", state, st)
	})
	dead := e.streamMsgs(t, e.names.DLQStream())
	if len(dead) != 1 || dead[0].Subject != "spool.dlq.low.cleanup" || dead[0].Header.Get(spool.HeaderAttempts) != "3" {
		t.Fatalf("dead letters = %v, want the cleanup task with 3 attempts", dead)
	}
	// Without Spool-Task-Id or Nats-Msg-Id the id is the sequence, and the
	// dead letter carries it.
	if got, want := dead[0].Header.Get(spool.HeaderTaskID), strconv.FormatUint(seq, 10); got != want {
		t.Errorf("dead letter Spool-Task-Id = %q, want %q", got, want)
	}
}

func TestRouterDeadLettersNonTaskSubject(t *testing.T) {
	t.Parallel()
	e := newRouterEnv(t)
	ctx := routerCtx(t)
	r := e.startRouter(t)
	// In the task stream's subjects, but not a valid task type.
	const subject = "spool.tasks.high.bad$type"
	h := nats.Header{}
	h.Set(spool.HeaderMsgID, "odd-1")
	seq := e.publishTask(t, subject, h, []byte("odd"))
	e.publishAdvisory(t, seq, 2)

	routerWaitFor(t, 10*time.Second, "the odd task dead-lettered", func() (bool, string) {
		idle, state := e.routerIdle(t)
		return idle && r.Stats().Routed == 1, fmt.Sprintf("%s, stats %+v", state, r.Stats())
	})
	dead := e.streamMsgs(t, e.names.DLQStream())
	if len(dead) != 1 {
		t.Fatalf("%d dead letters, want 1", len(dead))
	}
	if dead[0].Subject != "spool.dlq.high.unknown" || dead[0].Header.Get(spool.HeaderOriginalSubject) != subject ||
		dead[0].Header.Get(spool.HeaderTaskID) != "odd-1" || string(dead[0].Data) != "odd" {
		t.Errorf("dead letter = %s %v %q, want spool.dlq.high.unknown keeping subject, id and body", dead[0].Subject, dead[0].Header, dead[0].Data)
	}
	tasks, err := e.js.Stream(ctx, e.names.TaskStream())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tasks.GetMsg(ctx, seq); !errors.Is(err, jetstream.ErrMsgNotFound) {
		t.Errorf("odd task still in the task stream (err %v)", err)
	}
	doc, err := e.result(t, "odd-1")
	if err != nil || doc.State != spool.StateDead {
		t.Errorf("result = %+v, %v; want dead", doc, err)
	}
}

func TestRouterLeavesSchedulesAlone(t *testing.T) {
	t.Parallel()
	e := newRouterEnv(t)
	ctx := routerCtx(t)
	r := e.startRouter(t)
	h := nats.Header{}
	h.Set(spool.HeaderSchedule, spool.FormatScheduleAt(time.Now().Add(time.Hour)))
	h.Set(spool.HeaderScheduleTarget, "spool.tasks.normal.later")
	seq := e.publishTask(t, "spool.sched.later-1", h, []byte("later"))
	e.publishAdvisory(t, seq, 2)

	routerWaitFor(t, 10*time.Second, "the advisory dropped", func() (bool, string) {
		idle, state := e.routerIdle(t)
		return idle && r.Stats().Bad == 1, fmt.Sprintf("%s, stats %+v", state, r.Stats())
	})
	tasks, err := e.js.Stream(ctx, e.names.TaskStream())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tasks.GetMsg(ctx, seq); err != nil {
		t.Errorf("the pending schedule was removed: %v", err)
	}
	if n := e.msgCount(t, e.names.DLQStream()); n != 0 {
		t.Errorf("%d dead letters, want none", n)
	}
}

func TestRouterRetriesTransientFailures(t *testing.T) {
	t.Parallel()
	e := newRouterEnv(t)
	ctx := routerCtx(t)
	// Without the DLQ stream the publish fails: the advisory must be
	// retried, not lost, and the task must stay.
	if err := e.js.DeleteStream(ctx, e.names.DLQStream()); err != nil {
		t.Fatal(err)
	}
	h := nats.Header{}
	h.Set(spool.HeaderTaskID, "retry-1")
	seq := e.publishTask(t, "spool.tasks.critical.pay", h, []byte("pay"))
	r := e.startRouter(t, dlqrouter.WithTimeout(time.Second))
	e.publishAdvisory(t, seq, 2)

	routerWaitFor(t, 10*time.Second, "failed attempts", func() (bool, string) {
		return r.Stats().Failed >= 2, fmt.Sprintf("stats %+v", r.Stats())
	})
	tasks, err := e.js.Stream(ctx, e.names.TaskStream())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tasks.GetMsg(ctx, seq); err != nil {
		t.Fatalf("task lost while the DLQ was missing: %v", err)
	}

	if err := streams.Provision(ctx, e.js, e.topo, streamstest.Logger(t)); err != nil {
		t.Fatal(err)
	}
	routerWaitFor(t, 15*time.Second, "the task dead-lettered once the DLQ is back", func() (bool, string) {
		idle, state := e.routerIdle(t)
		return idle && r.Stats().Routed == 1, fmt.Sprintf("%s, stats %+v", state, r.Stats())
	})
	if dead := e.streamMsgs(t, e.names.DLQStream()); len(dead) != 1 || dead[0].Header.Get(spool.HeaderTaskID) != "retry-1" {
		t.Errorf("dead letters = %v, want retry-1 once", dead)
	}
}

func TestRouterLifecycle(t *testing.T) {
	t.Parallel()
	e := newRouterEnv(t)
	stopCtx := func() context.Context {
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		t.Cleanup(cancel)
		return ctx
	}

	t.Run("stop before start", func(t *testing.T) {
		r, err := dlqrouter.New(e.nc)
		if err != nil {
			t.Fatal(err)
		}
		if err := r.Stop(stopCtx()); err != nil {
			t.Errorf("Stop before Start: %v", err)
		}
		if err := r.Stop(stopCtx()); err != nil {
			t.Errorf("second Stop: %v", err)
		}
		select {
		case <-r.Stopped():
		default:
			t.Error("Stopped not closed after Stop")
		}
		if err := r.Start(routerCtx(t)); !errors.Is(err, dlqrouter.ErrStopped) {
			t.Errorf("Start after Stop = %v, want ErrStopped", err)
		}
	})

	t.Run("start twice, stop twice", func(t *testing.T) {
		r, err := dlqrouter.New(e.nc, dlqrouter.WithLogger(streamstest.Logger(t)))
		if err != nil {
			t.Fatal(err)
		}
		if err := r.Start(routerCtx(t)); err != nil {
			t.Fatal(err)
		}
		if err := r.Start(routerCtx(t)); err != nil {
			t.Errorf("second Start: %v", err)
		}
		if err := r.Stop(stopCtx()); err != nil {
			t.Errorf("Stop: %v", err)
		}
		if err := r.Stop(stopCtx()); err != nil {
			t.Errorf("second Stop: %v", err)
		}
		if err := r.Err(); err != nil {
			t.Errorf("Err after a stop = %v", err)
		}
	})

	t.Run("run until ctx ends", func(t *testing.T) {
		// A server of its own: a router stopped above may leave its pull
		// request waiting on the consumer, which would look like this
		// router pulling before it has started.
		e := newRouterEnv(t)
		r, err := dlqrouter.New(e.nc, dlqrouter.WithLogger(streamstest.Logger(t)))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() { done <- r.Run(ctx) }()
		// The router is pulling once the consumer sees a waiting request.
		routerWaitFor(t, 10*time.Second, "the router pulling", func() (bool, string) {
			c, err := e.js.Consumer(routerCtx(t), e.names.AdvisoryStream(), e.names.RouterConsumer())
			if err != nil {
				t.Fatal(err)
			}
			return c.CachedInfo().NumWaiting > 0, fmt.Sprintf("%d waiting", c.CachedInfo().NumWaiting)
		})
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run after ctx ended = %v, want nil", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("Run did not return after its ctx ended")
		}
	})

	t.Run("connection closed", func(t *testing.T) {
		nc, err := nats.Connect(e.url)
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		r, err := dlqrouter.New(nc, dlqrouter.WithLogger(streamstest.Logger(t)), dlqrouter.WithFetchWait(200*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		if err := r.Start(routerCtx(t)); err != nil {
			t.Fatal(err)
		}
		nc.Close()
		select {
		case <-r.Stopped():
		case <-time.After(10 * time.Second):
			t.Fatal("router still running after its connection closed")
		}
		if err := r.Err(); !errors.Is(err, nats.ErrConnectionClosed) {
			t.Errorf("Err = %v, want nats.ErrConnectionClosed", err)
		}
		if err := r.Stop(stopCtx()); err != nil {
			t.Errorf("Stop after the router ended: %v", err)
		}
	})

	t.Run("missing topology", func(t *testing.T) {
		r, err := dlqrouter.New(e.nc, dlqrouter.WithPrefix("elsewhere"))
		if err != nil {
			t.Fatal(err)
		}
		err = r.Start(routerCtx(t))
		if !errors.Is(err, jetstream.ErrStreamNotFound) {
			t.Errorf("Start without a topology = %v, want ErrStreamNotFound", err)
		}
	})

	t.Run("bad options", func(t *testing.T) {
		for name, opt := range map[string]dlqrouter.Option{
			"batch":      dlqrouter.WithBatch(0),
			"prefix":     dlqrouter.WithPrefix("a.b"),
			"worker":     dlqrouter.WithWorker(" "),
			"timeout":    dlqrouter.WithTimeout(time.Minute),
			"fetch wait": dlqrouter.WithFetchWait(time.Millisecond),
			"retry":      dlqrouter.WithRetryDelay(time.Hour),
		} {
			if _, err := dlqrouter.New(e.nc, opt); err == nil {
				t.Errorf("New with a bad %s option succeeded", name)
			}
		}
		if _, err := dlqrouter.New(nil); err == nil {
			t.Error("New(nil) succeeded")
		}
	})
}

// A workflow step whose worker crashes every time is dead-lettered by the
// router, which also advances its workflow: the step fails, the steps
// after it are cancelled and the workflow ends failed.
func TestRouterAdvancesWorkflowOfCrashedStep(t *testing.T) {
	t.Parallel()
	e := newRouterEnv(t)
	ctx := routerCtx(t)
	store, err := workflow.Open(ctx, e.js, e.names, nil)
	if err != nil {
		t.Fatal(err)
	}
	d := workflow.Doc{ID: "crashy"}
	d.Chain(workflow.Task("a", "email.send", nil), workflow.Task("b", "email.send", nil))
	if _, err := store.Submit(ctx, d); err != nil {
		t.Fatal(err)
	}
	e.crashWorker(t, spool.Normal)
	e.startRouter(t)
	r, err := store.Wait(ctx, "crashy")
	if err != nil {
		t.Fatal(err)
	}
	st, err := store.Status(ctx, "crashy")
	if err != nil {
		t.Fatal(err)
	}
	if r.State != workflow.Failed || st.Steps[0].State != workflow.Failed || st.Steps[1].State != workflow.Cancelled ||
		r.Failure == nil || r.Failure.Reason != string(spool.ReasonMaxDeliver) {
		t.Errorf("workflow %+v, steps %+v", r, st.Steps)
	}
}

// A task of an ordered key whose worker died on its last delivery holds
// its key's place; the router gives the place up when it dead-letters the
// task and asks the fleet to start the key, so the key's next task runs.
func TestRouterPassesTheTurnOfADeadOrderedTask(t *testing.T) {
	t.Parallel()
	e := newRouterEnv(t)
	ctx := routerCtx(t)
	const typ, key = "ledger.post", "acct-7"
	subject, err := e.names.TaskSubject(spool.Normal, typ)
	if err != nil {
		t.Fatal(err)
	}
	kicks, err := e.nc.SubscribeSync(e.names.KickSubject(limits.EncodeKey(key), typ))
	if err != nil {
		t.Fatal(err)
	}
	turns, err := limits.NewTurns(ctx, e.js, e.names)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		h := nats.Header{}
		h.Set(spool.HeaderKey, key)
		h.Set(spool.HeaderTaskID, fmt.Sprintf("ordered-%d", i))
		if _, err := turns.Park(ctx, typ, key, 1, subject, fmt.Sprintf("ordered-%d", i), &nats.Msg{Header: h, Data: []byte("x")}); err != nil {
			t.Fatal(err)
		}
	}
	turn, err := turns.Get(ctx, typ, key)
	if err != nil {
		t.Fatal(err)
	}
	if len(turn.Running) != 1 {
		t.Fatalf("turn after parking two tasks = %+v, want one place held", turn)
	}
	first := turn.Running[0]

	e.crashWorker(t, spool.Normal)
	e.startRouter(t)
	routerWaitFor(t, 20*time.Second, "the first task in the DLQ", func() (bool, string) {
		n := e.msgCount(t, e.names.DLQStream())
		return n == 1, fmt.Sprintf("%d dead letters", n)
	})
	if _, err := kicks.NextMsg(10 * time.Second); err != nil {
		t.Fatalf("no kick request for the dead task's key: %v", err)
	}
	turn, err = turns.Get(ctx, typ, key)
	if err != nil {
		t.Fatal(err)
	}
	if len(turn.Running) != 0 || turn.Seq != first {
		t.Fatalf("turn after the dead letter = %+v, want seq %d and no place held", turn, first)
	}
	// The kick a worker serves now releases the second task.
	if err := turns.Kick(ctx, typ, key, 1); err != nil {
		t.Fatal(err)
	}
	turn, err = turns.Get(ctx, typ, key)
	if err != nil {
		t.Fatal(err)
	}
	if len(turn.Running) != 1 || turn.Running[0] <= first {
		t.Fatalf("turn after the kick = %+v, want the second task (after %d) holding the place", turn, first)
	}
	dead := e.streamMsgs(t, e.names.DLQStream())[0]
	if got := dead.Header.Get(spool.HeaderTaskID); got != "ordered-0" {
		t.Errorf("dead letter is task %q, want ordered-0", got)
	}
	if want := "spool.dlq.normal." + typ; dead.Subject != want {
		t.Errorf("dead letter subject = %q, want %q (the released copy must not carry its held copy's subject)", dead.Subject, want)
	}
}

// A router made WithEvents(false) dead-letters as always and publishes no
// dead event; with events on, the same run hears it.
func TestRouterWithEvents(t *testing.T) {
	t.Parallel()
	for _, on := range []bool{true, false} {
		t.Run(fmt.Sprintf("events=%v", on), func(t *testing.T) {
			t.Parallel()
			e := newRouterEnv(t)
			sub, err := e.nc.SubscribeSync(e.names.Prefix() + ".events.>")
			if err != nil {
				t.Fatal(err)
			}
			subject, err := e.names.TaskSubject(spool.Normal, "email.send")
			if err != nil {
				t.Fatal(err)
			}
			h := nats.Header{}
			h.Set(spool.HeaderTaskID, "crashed-1")
			e.publishTask(t, subject, h, nil)
			e.crashWorker(t, spool.Normal)
			e.startRouter(t, dlqrouter.WithEvents(on))
			routerWaitFor(t, 20*time.Second, "the dead letter and the advisory acknowledged", func() (bool, string) {
				if n := e.msgCount(t, e.names.DLQStream()); n != 1 {
					return false, fmt.Sprintf("%d dead letters", n)
				}
				return e.routerIdle(t)
			})
			// The router publishes the event before it acks the advisory,
			// on the subscription's own connection: after a flush, the
			// subscription holds it.
			if err := e.nc.Flush(); err != nil {
				t.Fatal(err)
			}
			got := streamstest.Held(sub)
			var want []string
			if on {
				want = []string{"spool.events.dead.normal.crashed-1.email.send"}
			}
			if !slices.Equal(got, want) {
				t.Errorf("events heard %q, want %q", got, want)
			}
		})
	}
}
