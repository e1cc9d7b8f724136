package producer_test

import (
	"strconv"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/spoolq/spool/producer"
	spool "github.com/spoolq/spool/shared"
	"github.com/spoolq/spool/shared/limits"
)

// A task of an ordered type with a key is parked on its key's held
// subject, in enqueue order, by Enqueue and EnqueueBatch alike; the key's
// first task is released to its task subject at once (it holds the turn)
// and the others wait. Tasks without a key, and of other types, are
// published as usual.
func TestEnqueueParksOrderedKeys(t *testing.T) {
	t.Parallel()
	e := startEnv(t)
	ctx := ctxFor(t)
	st, err := limits.Open(ctx, e.js, e.names)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Put(ctx, limits.Rule{Type: "ledger.post", Ordered: limits.OrderHold}); err != nil {
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
	if n := e.subjectCount(t, held1); n != 3 {
		t.Errorf("%d tasks held for acct-1, want 3 (its first runs)", n)
	}
	if n := e.subjectCount(t, e.names.HeldFilter()); n != 3 {
		t.Errorf("%d tasks held in all, want 3 (acct-2's only task runs)", n)
	}
	// Released: post-0 and post-b0 with their turn; unordered: nokey-0.
	if n := e.subjectCount(t, "spool.tasks.normal.ledger.post"); n != 3 {
		t.Errorf("%d ledger.post tasks on the task subject, want 3", n)
	}
	if n := e.subjectCount(t, "spool.tasks.normal.other"); n != 1 {
		t.Errorf("%d other tasks on the task subject, want 1", n)
	}
	first, err := e.tasks.GetMsg(ctx, 0, jetstream.WithGetMsgSubject("spool.tasks.normal.ledger.post"))
	if err != nil {
		t.Fatal(err)
	}
	if id := spool.TaskID(first.Header, first.Sequence); id != "post-0" || first.Header.Get(spool.HeaderOrderSeq) == "" {
		t.Errorf("first released task %q with %s %q, want post-0 with its turn", id, spool.HeaderOrderSeq, first.Header.Get(spool.HeaderOrderSeq))
	}
	next, err := e.tasks.GetMsg(ctx, 0, jetstream.WithGetMsgSubject(held1))
	if err != nil {
		t.Fatal(err)
	}
	if id := spool.TaskID(next.Header, next.Sequence); id != "post-1" {
		t.Errorf("next held task of acct-1 %q, want post-1", id)
	}
}
