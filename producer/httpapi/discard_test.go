package httpapi_test

import (
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/spoolq/spool/producer"
	"github.com/spoolq/spool/producer/httpapi"
	spool "github.com/spoolq/spool/shared"
	"github.com/spoolq/spool/streams/embedded"
)

// result_policy in an enqueue body travels as Spool-Result; a bad one is
// refused with its own code. A task whose result was discarded answers 410
// result_discarded, state completed, on GET /v1/tasks/{id}, on its output
// and on a ?wait= that was waiting for it, as soon as its marker is
// written.
func TestResultDiscardedOverHTTP(t *testing.T) {
	t.Parallel()
	b := startBroker(t, embedded.Options{}, httpapi.Options{})
	r := b.do(t, "POST", "/v1/tasks", "", []byte(`{"type":"metrics.push","id":"m1","result_policy":"discard"}`))
	if r.status != 201 {
		t.Fatalf("enqueue: %d %s", r.status, r.body)
	}
	m, err := b.tasks.GetMsg(ctxFor(t), decode[producer.EnqueueResult](t, r).Sequence)
	if err != nil {
		t.Fatal(err)
	}
	if got := m.Header.Get(spool.HeaderResult); got != "discard" {
		t.Fatalf("Spool-Result %q, want discard", got)
	}
	r = b.do(t, "POST", "/v1/tasks", "", []byte(`{"type":"metrics.push","result_policy":"drop"}`))
	if code, field, _ := r.errorCode(); r.status != 400 || code != "invalid_result_policy" || field != "result_policy" {
		t.Fatalf("bad result policy: %d %s", r.status, r.body)
	}

	done := make(chan response, 1)
	go func() { done <- b.do(t, "GET", "/v1/tasks/m1?wait=10s", "", nil) }()
	start := time.Now()
	// The worker's processing state, then its marker.
	b.putResult(t, spool.Result{ID: "m1", Type: "metrics.push", State: spool.StateProcessing, Attempts: 1})
	msg := &nats.Msg{Subject: "$KV.spool_results.m1", Header: nats.Header{}}
	spool.SetDiscardedMarker(msg.Header)
	if _, err := b.js.PublishMsg(ctxFor(t), msg); err != nil {
		t.Fatal(err)
	}
	r = <-done
	if code, _, _ := r.errorCode(); r.status != 410 || code != "result_discarded" || !strings.Contains(string(r.body), `"state":"completed"`) {
		t.Fatalf("wait: %d %s", r.status, r.body)
	}
	if time.Since(start) > 4*time.Second {
		t.Fatalf("the wait took %s", time.Since(start))
	}
	for _, path := range []string{"/v1/tasks/m1", "/v1/tasks/m1/result"} {
		r = b.do(t, "GET", path, "", nil)
		if code, _, _ := r.errorCode(); r.status != 410 || code != "result_discarded" {
			t.Errorf("GET %s: %d %s", path, r.status, r.body)
		}
	}
	r = b.do(t, "DELETE", "/v1/tasks/m1", "", nil)
	if code, _, _ := r.errorCode(); r.status != 409 || code != "task_finished" || !strings.Contains(string(r.body), `"state":"completed"`) {
		t.Fatalf("cancel: %d %s", r.status, r.body)
	}
}
