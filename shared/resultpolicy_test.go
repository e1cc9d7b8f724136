package spool_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	spool "github.com/spoolq/spool/shared"
)

// The marker of a discarded result is a KV delete that says why; a plain
// delete, or the header on a message that is not a delete, is not one.
func TestDiscardedMarker(t *testing.T) {
	t.Parallel()
	h := nats.Header{}
	spool.SetDiscardedMarker(h)
	if h.Get("KV-Operation") != "DEL" || h.Get("Spool-Result") != "discarded" || !spool.IsDiscardedMarker(h) {
		t.Fatalf("marker header %v", h)
	}
	for name, h := range map[string]nats.Header{
		"plain delete":   {"KV-Operation": {"DEL"}},
		"purge":          {"KV-Operation": {"PURGE"}, "Spool-Result": {"discarded"}},
		"not a delete":   {"Spool-Result": {"discarded"}},
		"task's request": {"KV-Operation": {"DEL"}, "Spool-Result": {"discard"}},
	} {
		if spool.IsDiscardedMarker(h) {
			t.Errorf("%s: %v taken for a marker", name, h)
		}
	}
}

// A completed event of a discarded result says so, and the encoder without
// reflection writes what json.Marshal writes.
func TestResultDiscardedEncoding(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 11, 25, 14, 3, 4, 567890123, time.UTC)
	doc := spool.Result{ID: "t-1", Type: "a.b", Priority: spool.Low, State: spool.StateCompleted, Attempts: 1,
		EnqueuedAt: at, FinishedAt: &at, ResultDiscarded: true}
	fast, ok := spool.AppendResult(nil, &doc)
	if !ok {
		t.Fatal("the fast encoder refused the document")
	}
	want, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	if string(fast) != string(want) {
		t.Fatalf("fast encoder\n%s\njson.Marshal\n%s", fast, want)
	}
}
