package dlqrouter_test

import (
	"errors"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/spoolq/spool/consumer/dlqrouter"
	spool "github.com/spoolq/spool/shared"
	"github.com/spoolq/spool/shared/limits"
	"github.com/spoolq/spool/shared/workflow"
	"github.com/spoolq/spool/streams/dlq"
)

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
