package results_test

import (
	"encoding/json"
	"testing"
	"time"

	spool "github.com/spoolq/spool/shared"
)

// Event publishes {"event","at","task"} on the task's event subject, the
// document as the bucket would store it (the worker's name filled in),
// both for a document the fast encoder takes and for one it leaves to
// json.Marshal (a progress report).
func TestEventBody(t *testing.T) {
	t.Parallel()
	e, s := newStore(t)
	sub, err := e.NC.SubscribeSync(e.Names.EventSubject(spool.EventStarted, spool.High, "t1", "a"))
	if err != nil {
		t.Fatal(err)
	}
	enq := time.Unix(0, 1_795_597_200_123_456_789).UTC()
	docs := []spool.Result{
		{ID: "t1", Type: "a", Priority: spool.High, State: spool.StateProcessing, Attempts: 1, EnqueuedAt: enq},
		{ID: "t1", Type: "a", Priority: spool.High, State: spool.StateProcessing, Attempts: 1, EnqueuedAt: enq,
			Progress: &spool.Progress{Percent: new(40.0)}},
	}
	for i, doc := range docs {
		before := time.Now()
		s.Event(spool.EventStarted, &doc)
		m, err := sub.NextMsg(5 * time.Second)
		if err != nil {
			t.Fatalf("event %d: %v", i, err)
		}
		var ev spool.Event
		if err := json.Unmarshal(m.Data, &ev); err != nil {
			t.Fatalf("event %d: %v: %s", i, err, m.Data)
		}
		if ev.Event != spool.EventStarted || ev.At.Before(before.Add(-time.Second)) || ev.Task.ID != "t1" ||
			ev.Task.State != spool.StateProcessing || !ev.Task.EnqueuedAt.Equal(enq) || ev.Task.Worker != "w1" ||
			(i == 1) != (ev.Task.Progress != nil) {
			t.Fatalf("event %d: %+v from %s", i, ev, m.Data)
		}
	}
}
