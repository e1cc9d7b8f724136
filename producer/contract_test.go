package producer_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/spoolq/spool/producer"
)

// TestPlainNATSClientSpeaksTheContract publishes with nats.go alone, using
// only the documented subject and header names as literals, and reads the
// tasks back through the library.
func TestPlainNATSClientSpeaksTheContract(t *testing.T) {
	t.Parallel()
	e := startEnv(t)
	ctx := ctxFor(t)
	raw, err := jetstream.New(e.nc)
	if err != nil {
		t.Fatal(err)
	}

	// An immediate task with Nats-Msg-Id: the library sees the same id as
	// the same task.
	m := nats.NewMsg("spool.tasks.critical.billing.charge")
	m.Header.Set("Nats-Msg-Id", "charge-1")
	m.Header.Set("Spool-Max-Retries", "2")
	m.Data = []byte(`{"amount":5}`)
	ack, err := raw.PublishMsg(ctx, m)
	if err != nil {
		t.Fatal(err)
	}
	res, err := e.client.Enqueue(ctx, producer.Task{Type: "billing.charge", ID: "charge-1", Payload: []byte(`{"amount":5}`)})
	if err != nil || !res.Duplicate || res.Sequence != ack.Sequence {
		t.Fatalf("library enqueue of a raw task's id: %+v, %v", res, err)
	}

	// A task with no headers at all is accepted as is.
	if _, err := raw.Publish(ctx, "spool.tasks.idle.cleanup", nil); err != nil {
		t.Fatal(err)
	}

	// A raw delayed task: the library can cancel it by id.
	s := nats.NewMsg("spool.sched.raw-delayed")
	s.Header.Set("Nats-Schedule", "@at "+time.Now().Add(time.Hour).UTC().Format(time.RFC3339Nano))
	s.Header.Set("Nats-Schedule-Target", "spool.tasks.low.report")
	s.Header.Set("Spool-Task-Id", "raw-delayed")
	if _, err := raw.PublishMsg(ctx, s); err != nil {
		t.Fatal(err)
	}
	if r, err := e.client.Cancel(ctx, "raw-delayed"); err != nil || r.State != "cancelled" {
		t.Fatalf("cancel of a raw schedule: %+v, %v", r, err)
	}

	// A raw unique claim: the library honours it (KV key = base64url of the
	// unique key, value = the holder's id).
	kv, err := raw.KeyValue(ctx, "spool_unique")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Create(ctx, "dXNlci05", []byte("raw-holder"), jetstream.KeyTTL(time.Hour)); err != nil { // "user-9"
		t.Fatal(err)
	}
	_, err = e.client.Enqueue(ctx, producer.NewTask("welcome", nil), producer.Unique("user-9", time.Hour))
	var conflict *producer.UniqueConflictError
	if !asConflict(err, &conflict) || conflict.ExistingID != "raw-holder" {
		t.Fatalf("raw unique claim not honoured: %v", err)
	}

	// A result document written as plain JSON is read by the library.
	rkv, err := raw.KeyValue(ctx, "spool_results")
	if err != nil {
		t.Fatal(err)
	}
	doc := `{"id":"charge-1","type":"billing.charge","priority":"critical","state":"completed","attempts":1,"result":{"charged":5},"enqueued_at":"2026-01-02T03:04:05Z"}`
	if _, err := rkv.PutString(ctx, "charge-1", doc); err != nil {
		t.Fatal(err)
	}
	r, err := e.client.Wait(ctx, "charge-1")
	if err != nil {
		t.Fatal(err)
	}
	var out map[string]int
	if err := json.Unmarshal(r.Result, &out); err != nil || out["charged"] != 5 || r.Type != "billing.charge" {
		t.Fatalf("result %+v (%v)", r, err)
	}
	if n := e.streamMsgs(t); n != 2 {
		t.Fatalf("stream holds %d tasks, want the 2 immediate ones", n)
	}
}
