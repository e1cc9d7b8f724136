package dlq_test

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	spool "github.com/spoolq/spool/shared"
	"github.com/spoolq/spool/streams/dlq"
)

func TestSubjectFor(t *testing.T) {
	t.Parallel()
	names := spool.DefaultNames()
	tests := []struct{ subject, want string }{
		{"spool.tasks.high.email.send", "spool.dlq.high.email.send"},
		{"spool.tasks.idle.x", "spool.dlq.idle.x"},
		{"spool.tasks.low", "spool.dlq.low.unknown"},
		{"spool.tasks.bogus.x", "spool.dlq.normal.unknown"},
		{"other.subject", "spool.dlq.normal.unknown"},
	}
	for _, tc := range tests {
		if got := dlq.SubjectFor(names, tc.subject); got != tc.want {
			t.Errorf("SubjectFor(%q) = %q, want %q", tc.subject, got, tc.want)
		}
	}
}

func TestHeader(t *testing.T) {
	t.Parallel()
	names := spool.DefaultNames()
	orig := nats.Header{}
	for k, v := range map[string]string{
		"Nats-Stream": "SPOOL_TASKS", "Nats-Sequence": "7", "Nats-Subject": "spool.tasks.high.x",
		"Nats-Time-Stamp": "2026-01-01T00:00:00Z", "Nats-TTL": "1h", "Nats-Msg-Id": "abc",
		"Nats-Schedule-Target": "spool.tasks.high.x", "Nats-Expected-Stream": "SPOOL_TASKS",
		spool.HeaderTaskID: "abc", "X-Tenant": "acme", spool.HeaderTraceParent: "00-1-2-01",
	} {
		orig.Set(k, v)
	}
	failed := time.Date(2026, 11, 22, 1, 2, 3, 4, time.UTC)
	h := dlq.Header(names, dlq.Message{
		Subject: "spool.tasks.high.x", Seq: 7, Header: orig, Reason: spool.ReasonPermanent,
		Err: "declined", Attempts: 2, FailedAt: failed,
	})
	want := map[string]string{
		spool.HeaderTaskID: "abc", "X-Tenant": "acme", spool.HeaderTraceParent: "00-1-2-01",
		spool.HeaderError: "declined", spool.HeaderReason: "permanent", spool.HeaderAttempts: "2",
		spool.HeaderFailedAt: "2026-11-22T01:02:03.000000004Z", spool.HeaderOriginalSubject: "spool.tasks.high.x",
		spool.HeaderOriginalSeq: "7", spool.HeaderMsgID: "dlq-SPOOL_TASKS-7",
	}
	if len(h) != len(want) {
		t.Errorf("dead letter headers %v, want exactly %v", h, want)
	}
	for k, v := range want {
		if got := h.Get(k); got != v {
			t.Errorf("%s = %q, want %q", k, got, v)
		}
	}
	if orig.Get("Nats-Stream") != "SPOOL_TASKS" || orig.Get(spool.HeaderReason) != "" {
		t.Error("the original headers were modified")
	}
}

// A raw task identified by Nats-Msg-Id alone keeps its id in the dead letter.
func TestHeaderKeepsTheMsgID(t *testing.T) {
	t.Parallel()
	orig := nats.Header{}
	orig.Set(spool.HeaderMsgID, "raw-7")
	h := dlq.Header(spool.DefaultNames(), dlq.Message{
		Subject: "spool.tasks.low.x", Seq: 9, Header: orig, Reason: spool.ReasonError,
	})
	if got := h.Get(spool.HeaderTaskID); got != "raw-7" {
		t.Errorf("Spool-Task-Id %q, want raw-7", got)
	}
	if got := h.Get(spool.HeaderMsgID); got != "dlq-SPOOL_TASKS-9" {
		t.Errorf("Nats-Msg-Id %q", got)
	}
}

// A task without Spool-Task-Id gets its id in the dead letter, its
// partition's sequence id included; an invalid one is kept as it was.
func TestHeaderTaskIDOnPartitions(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		stream, taskID, want string
	}{
		{"", "", "9"},
		{"SPOOL_TASKS_1", "", "p1-9"},
		{"SPOOL_TASKS_1", "abc", "abc"},
		{"SPOOL_TASKS_1", "bad id!", "bad id!"},
	} {
		orig := nats.Header{}
		if c.taskID != "" {
			orig.Set(spool.HeaderTaskID, c.taskID)
		}
		h := dlq.Header(spool.DefaultNames(), dlq.Message{
			Subject: "spool.tasks.low.x", Stream: c.stream, Seq: 9, Header: orig, Reason: spool.ReasonError,
		})
		if got := h.Get(spool.HeaderTaskID); got != c.want {
			t.Errorf("stream %q, Spool-Task-Id %q: dead letter has %q, want %q", c.stream, c.taskID, got, c.want)
		}
	}
}
