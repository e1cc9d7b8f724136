package main

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	spool "github.com/spoolq/spool/shared"
	"github.com/spoolq/spool/streams/dlq"
)

func TestDLQCommands(t *testing.T) {
	t.Parallel()
	url, admin := startAdmin(t)
	if _, err := admin("provision"); err != nil {
		t.Fatal(err)
	}
	nc, js := connect(t, url)
	defer nc.Close()
	for i, reason := range []string{"no_handler", "error", "no_handler"} {
		h := nats.Header{}
		h.Set(spool.HeaderTaskID, "task-"+strconv.Itoa(i))
		h.Set(spool.HeaderReason, reason)
		h.Set(spool.HeaderError, "failed\nbadly")
		h.Set(spool.HeaderAttempts, "1")
		h.Set(spool.HeaderOriginalSubject, "spool.tasks.normal.report")
		h.Set(spool.HeaderOriginalSeq, strconv.Itoa(i+1))
		if _, err := js.PublishMsg(t.Context(), &nats.Msg{Subject: "spool.dlq.normal.report", Header: h, Data: []byte(`{"i":1}`)}); err != nil {
			t.Fatal(err)
		}
	}

	out, err := admin("dlq", "list")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "task-0") || !strings.Contains(out, "failed badly") || strings.Count(out, "\n") != 4 {
		t.Errorf("list table:\n%s", out)
	}
	out, err = admin("dlq", "list", "--reason", "no_handler", "--limit", "1", "--json")
	if err != nil {
		t.Fatal(err)
	}
	var page dlq.Page
	if err := json.Unmarshal([]byte(out), &page); err != nil {
		t.Fatal(err)
	}
	if len(page.Letters) != 1 || page.Letters[0].TaskID != "task-0" || page.Next == 0 {
		t.Fatalf("first page %+v", page)
	}
	out, err = admin("dlq", "list", "--reason", "no_handler", "--since", "1h", "--after", strconv.FormatUint(page.Next, 10), "--json")
	if err != nil {
		t.Fatal(err)
	}
	page = dlq.Page{}
	if err := json.Unmarshal([]byte(out), &page); err != nil || len(page.Letters) != 1 || page.Letters[0].TaskID != "task-2" {
		t.Fatalf("second page %s (%v)", out, err)
	}
	seq := strconv.FormatUint(page.Letters[0].Seq, 10)
	out, err = admin("dlq", "show", seq)
	if err != nil || !strings.Contains(out, "Spool-Reason: no_handler") || !strings.Contains(out, `{"i":1}`) {
		t.Fatalf("show: %v\n%s", err, out)
	}

	// Replay by filter: both no_handler letters go back.
	out, err = admin("dlq", "replay", "--reason", "no_handler", "--json")
	if err != nil {
		t.Fatal(err)
	}
	var replayed struct{ Replayed []dlq.Replayed }
	if err := json.Unmarshal([]byte(out), &replayed); err != nil || len(replayed.Replayed) != 2 {
		t.Fatalf("replay: %s (%v)", out, err)
	}
	tasks, err := js.Stream(t.Context(), "SPOOL_TASKS")
	if err != nil {
		t.Fatal(err)
	}
	if info, err := tasks.Info(t.Context()); err != nil || info.State.Msgs != 2 {
		t.Fatalf("task stream after replay: %v %+v", err, info)
	}

	for _, bad := range [][]string{
		{"dlq"}, {"dlq", "frob"}, {"dlq", "purge"}, {"dlq", "replay"}, {"dlq", "show"},
		{"dlq", "list", "--priority", "urgent"}, {"dlq", "list", "--reason", "bad"},
		{"dlq", "list", "--since", "yesterday"}, {"dlq", "purge", "--all", "--type", "x"},
		{"dlq", "replay", "1", "--type", "x"}, {"dlq", "list", "7"},
	} {
		if _, err := admin(bad...); err == nil {
			t.Errorf("spool-admin %q succeeded", bad)
		}
	}
	out, err = admin("dlq", "purge", "--until", time.Now().Add(time.Minute).Format(time.RFC3339))
	if err != nil || !strings.Contains(out, "purged 1 ") {
		t.Fatalf("purge: %v %s", err, out)
	}
	if out, err = admin("dlq", "purge", "--all", "--json"); err != nil || !strings.Contains(out, `"purged": 0`) {
		t.Fatalf("purge --all: %v %s", err, out)
	}
}
