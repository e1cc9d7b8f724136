package spool_test

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"

	spool "github.com/spoolq/spool/shared"
)

// TestEncodeEvent checks that the encoder without reflection (one buffer,
// the document written after the event's head) and the json.Marshal
// fallback both decode to the event they were given.
func TestEncodeEvent(t *testing.T) {
	at := time.Date(2026, 11, 25, 14, 3, 4, 567890123, time.UTC)
	next := at.Add(time.Minute)
	for name, doc := range map[string]spool.Result{
		"enqueued":  {ID: "t-1", Type: "email.send", Priority: spool.High, State: spool.StatePending, EnqueuedAt: at, TraceParent: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"},
		"scheduled": {ID: "t-2", Type: "a.b", Priority: spool.Low, State: spool.StateScheduled, EnqueuedAt: at, NextAttempt: &next},
		// A cancel reason leaves the document to json.Marshal.
		"fallback": {ID: "t-3", Type: "x", Priority: spool.Normal, State: spool.StateCancelled, CancelReason: "by \"ops\"", EnqueuedAt: at},
	} {
		t.Run(name, func(t *testing.T) {
			b, err := spool.EncodeEvent(spool.EventEnqueued, at, doc)
			if err != nil {
				t.Fatal(err)
			}
			var got spool.Event
			if err := json.Unmarshal(b, &got); err != nil {
				t.Fatalf("%s: %v", b, err)
			}
			want := spool.Event{Event: spool.EventEnqueued, At: at, Task: doc}
			if !reflect.DeepEqual(normalize(t, got), normalize(t, want)) {
				t.Errorf("decoded\n%+v\nwant\n%+v\nfrom %s", got, want, b)
			}
		})
	}
}

// normalize round-trips e through json.Marshal, so times compare by their
// encoded value.
func normalize(t *testing.T, e spool.Event) spool.Event {
	t.Helper()
	b, err := json.Marshal(e)
	if err != nil {
		t.Fatal(err)
	}
	var out spool.Event
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	return out
}
