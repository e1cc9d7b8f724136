package producer_test

import (
	"strings"
	"testing"

	"github.com/spoolq/spool/producer"
	"github.com/spoolq/spool/shared/limits"
)

// The producer finds the rule of a type through a pattern: ledger.* is
// ordered, so keyed tasks of ledger.post and ledger.void are parked on
// their keys' held subjects; an exact rule without ordering overrides it
// for ledger.free, fair.> makes fair.a.b fair (parked too), and a type
// no rule matches is published as usual.
func TestEnqueueFindsPatternRule(t *testing.T) {
	t.Parallel()
	e := startEnv(t)
	ctx := ctxFor(t)
	st, err := limits.Open(ctx, e.js, e.names)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range []limits.Rule{
		{Type: "ledger.*", Ordered: limits.OrderHold},
		{Type: "ledger.free", Concurrency: 5},
		{Type: "fair.>", Fair: &limits.Fair{Window: 2}},
	} {
		if err := st.Put(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	for _, typ := range []string{"ledger.post", "ledger.void", "ledger.free", "fair.a.b", "other"} {
		if _, err := e.client.Enqueue(ctx, producer.Task{Type: typ, Key: "acct-1", ID: "t-" + strings.ReplaceAll(typ, ".", "_")}); err != nil {
			t.Fatal(err)
		}
	}
	for typ, held := range map[string]uint64{"ledger.post": 1, "ledger.void": 1, "ledger.free": 0, "fair.a.b": 1, "other": 0} {
		if n := e.subjectCount(t, e.names.HeldSubject(limits.EncodeKey("acct-1"), typ)); n != held {
			t.Errorf("%s: %d tasks held, want %d", typ, n, held)
		}
		if n := e.subjectCount(t, "spool.tasks.normal."+typ); n != 1-held {
			t.Errorf("%s: %d tasks on the task subject, want %d", typ, n, 1-held)
		}
	}
}
