package producer_test

import (
	"errors"
	"slices"
	"strconv"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/spoolq/spool/producer"
	spool "github.com/spoolq/spool/shared"
	"github.com/spoolq/spool/shared/limits"
)

// A task of an ordered type with a key is parked on its key's held
// subject, in enqueue order, by Enqueue and EnqueueBatch alike, and the
// producer asks the workers to start the key (a kick request: it has no
// right to release held tasks itself). Tasks without a key, and of other
// types, are published as usual. A worker's kick then releases the key's
// first task with its turn.
func TestEnqueueParksOrderedKeys(t *testing.T) {
	t.Parallel()
	e := startEnv(t)
	ctx := ctxFor(t)
	e.orderType(t, "ledger.post")
	kicks := make(chan string, 16)
	sub, err := e.nc.Subscribe(e.names.KickFilter(), func(m *nats.Msg) { kicks <- m.Subject })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := e.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	if _, err := e.client.Enqueue(ctx, producer.Task{Type: "ledger.post", Key: "acct-1", ID: "post-0"}); err != nil {
		t.Fatal(err)
	}
	batch := []producer.Task{{Type: "ledger.post", Key: "acct-2", ID: "post-b0"}, {Type: "other", Key: "acct-1", ID: "other-0"}, {Type: "ledger.post", ID: "nokey-0"}}
	for i := 1; i < 4; i++ {
		batch = append(batch, producer.Task{Type: "ledger.post", Key: "acct-1", ID: "post-" + strconv.Itoa(i)})
	}
	if _, err := e.client.EnqueueBatch(ctx, batch); err != nil {
		t.Fatal(err)
	}
	held1 := e.names.HeldSubject(limits.EncodeKey("acct-1"), "ledger.post")
	if n := e.subjectCount(t, held1); n != 4 {
		t.Errorf("%d tasks held for acct-1, want 4", n)
	}
	if n := e.subjectCount(t, e.names.HeldFilter()); n != 5 {
		t.Errorf("%d tasks held in all, want 5 (acct-1's four and acct-2's one)", n)
	}
	// Unordered: nokey-0 and the other type's task.
	if n := e.subjectCount(t, "spool.tasks.normal.ledger.post"); n != 1 {
		t.Errorf("%d ledger.post tasks on the task subject, want 1 (the task without a key)", n)
	}
	if n := e.subjectCount(t, "spool.tasks.normal.other"); n != 1 {
		t.Errorf("%d other tasks on the task subject, want 1", n)
	}
	want := map[string]bool{
		e.names.KickSubject(limits.EncodeKey("acct-1"), "ledger.post"): true,
		e.names.KickSubject(limits.EncodeKey("acct-2"), "ledger.post"): true,
	}
	for len(want) > 0 {
		select {
		case subj := <-kicks:
			delete(want, subj)
		case <-ctx.Done():
			t.Fatalf("no kick request on %v", want)
		}
	}
	// A worker serving the kick releases acct-1's first task with its turn.
	turns, err := limits.NewTurns(ctx, e.js, e.names)
	if err != nil {
		t.Fatal(err)
	}
	if err := turns.Kick(ctx, "ledger.post", "acct-1", 1); err != nil {
		t.Fatal(err)
	}
	first, err := e.tasks.GetMsg(ctx, 0, jetstream.WithGetMsgSubject("spool.tasks.normal.ledger.post"))
	if err != nil {
		t.Fatal(err)
	}
	if id := e.names.TaskID(first.Header, e.names.TaskStream(), first.Sequence); id != "nokey-0" {
		t.Errorf("first task on the task subject %q, want nokey-0", id)
	}
	released, err := e.tasks.GetLastMsgForSubject(ctx, "spool.tasks.normal.ledger.post")
	if err != nil {
		t.Fatal(err)
	}
	if id := e.names.TaskID(released.Header, e.names.TaskStream(), released.Sequence); id != "post-0" || released.Header.Get(spool.HeaderOrderSeq) == "" {
		t.Errorf("released task %q with %s %q, want post-0 with its turn", id, spool.HeaderOrderSeq, released.Header.Get(spool.HeaderOrderSeq))
	}
	next, err := e.tasks.GetMsg(ctx, 0, jetstream.WithGetMsgSubject(held1))
	if err != nil {
		t.Fatal(err)
	}
	if id := e.names.TaskID(next.Header, e.names.TaskStream(), next.Sequence); id != "post-1" {
		t.Errorf("next held task of acct-1 %q, want post-1", id)
	}
}

// orderType makes typ ordered (hold).
func (e *env) orderType(t *testing.T, typ string) {
	t.Helper()
	st, err := limits.Open(ctxFor(t), e.js, e.names)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Put(ctxFor(t), limits.Rule{Type: typ, Ordered: limits.OrderHold}); err != nil {
		t.Fatal(err)
	}
}

// heldIDs lists the task ids on a held subject, in stream order.
func (e *env) heldIDs(t *testing.T, held string) []string {
	t.Helper()
	var ids []string
	for seq := uint64(0); ; {
		m, err := e.tasks.GetMsg(ctxFor(t), seq, jetstream.WithGetMsgSubject(held))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return ids
		}
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, e.names.TaskID(m.Header, e.names.TaskStream(), m.Sequence))
		seq = m.Sequence + 1
	}
}

// A run of EnqueueAsync calls, EnqueueBatch, and the two mixed keep the
// enqueue order of an ordered key's tasks on its held subject, with
// another key's tasks interleaved.
func TestEnqueueAsyncAndBatchKeepKeyOrder(t *testing.T) {
	t.Parallel()
	e := startEnv(t)
	ctx := ctxFor(t)
	e.orderType(t, "ledger.post")
	want := map[string][]string{}
	task := func(key string, i int) producer.Task {
		id := key + "-" + strconv.Itoa(i)
		want[key] = append(want[key], id)
		return producer.Task{Type: "ledger.post", Key: key, ID: id}
	}
	var pending []*producer.Pending
	async := func(from, to int) {
		for i := from; i < to; i++ {
			for _, key := range []string{"a", "b"} {
				p, err := e.client.EnqueueAsync(ctx, task(key, i))
				if err != nil {
					t.Fatal(err)
				}
				pending = append(pending, p)
			}
		}
	}
	async(0, 25)
	var batch []producer.Task
	for i := 25; i < 75; i++ {
		batch = append(batch, task("a", i), task("b", i))
	}
	if _, err := e.client.EnqueueBatch(ctx, batch); err != nil {
		t.Fatal(err)
	}
	async(75, 100)
	for _, p := range pending {
		if _, err := p.Wait(ctx); err != nil {
			t.Fatal(err)
		}
	}
	for _, key := range []string{"a", "b"} {
		got := e.heldIDs(t, e.names.HeldSubject(limits.EncodeKey(key), "ledger.post"))
		if !slices.Equal(got, want[key]) {
			t.Errorf("key %s held in order %v, want %v", key, got, want[key])
		}
	}
}
