package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	spool "github.com/spoolq/spool/shared"
	"github.com/spoolq/spool/shared/limits"
)

// A key whose place holder was purged by hand waits until an operator
// unblocks it; limits unblock then releases the key's next held task.
func TestLimitsUnblockStartsAStalledKey(t *testing.T) {
	url, admin := startAdmin(t)
	if _, err := admin("provision"); err != nil {
		t.Fatal(err)
	}
	if _, err := admin("limits", "set", "--type", "ledger.post", "--ordered", "hold"); err != nil {
		t.Fatal(err)
	}
	if _, err := admin("limits", "unblock", "ledger.post"); err == nil || !strings.Contains(err.Error(), "a task type and a key") {
		t.Fatalf("unblock with one argument: err = %v, want a usage error", err)
	}
	nc, js := connect(t, url)
	defer nc.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	names := spool.DefaultNames()
	turns, err := limits.NewTurns(ctx, js, names)
	if err != nil {
		t.Fatal(err)
	}
	const typ, key = "ledger.post", "acct-1"
	subject, err := names.TaskSubject(spool.Normal, typ)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"t-1", "t-2"} {
		h := nats.Header{}
		h.Set(spool.HeaderKey, key)
		h.Set(spool.HeaderTaskID, id)
		if _, err := turns.Park(ctx, typ, key, 1, subject, id, &nats.Msg{Header: h, Data: []byte(id)}); err != nil {
			t.Fatal(err)
		}
	}
	// The operator purges the released task: its place stays taken.
	tasks, err := js.Stream(ctx, names.TaskStream())
	if err != nil {
		t.Fatal(err)
	}
	if err := tasks.Purge(ctx, jetstream.WithPurgeSubject(subject)); err != nil {
		t.Fatal(err)
	}
	before, err := turns.Get(ctx, typ, key)
	if err != nil {
		t.Fatal(err)
	}
	if len(before.Running) != 1 {
		t.Fatalf("turn before unblock = %+v, want the purged task's place held", before)
	}

	out, err := admin("limits", "unblock", typ, key)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "1 place(s) given up") || !strings.Contains(out, "1 task(s) now hold a place") {
		t.Errorf("unblock output %q, want one place given up and one taken", out)
	}
	after, err := turns.Get(ctx, typ, key)
	if err != nil {
		t.Fatal(err)
	}
	if len(after.Running) != 1 || after.Running[0] <= before.Running[0] {
		t.Fatalf("turn after unblock = %+v, want the next task (after %d) holding the place", after, before.Running[0])
	}
	m, err := tasks.GetLastMsgForSubject(ctx, subject)
	if err != nil {
		t.Fatalf("the next task was not released to %s: %v", subject, err)
	}
	if string(m.Data) != "t-2" {
		t.Errorf("released task %q, want t-2", m.Data)
	}
}
