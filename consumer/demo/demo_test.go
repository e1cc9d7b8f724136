package demo_test

import (
	"encoding/json"
	"fmt"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/spoolq/spool/consumer"
	"github.com/spoolq/spool/consumer/demo"
	"github.com/spoolq/spool/consumer/spooltest"
	spool "github.com/spoolq/spool/shared"
	"github.com/spoolq/spool/streams/streamstest"
)

// start runs a server and a worker with the demo handlers, and subscribes
// to the events filter selects before the worker starts.
func start(t *testing.T, filter spool.EventFilter) (*spooltest.Server, *nats.Subscription) {
	t.Helper()
	srv := spooltest.Start(t)
	subject, err := srv.Names.EventFilterSubject(filter)
	if err != nil {
		t.Fatal(err)
	}
	sub, err := srv.NC.SubscribeSync(subject)
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.NC.Flush(); err != nil {
		t.Fatal(err)
	}
	mux := consumer.NewMux()
	demo.Register(mux)
	srv.Run(t, mux)
	return srv, sub
}

// publish enqueues a task of typ with id and payload by the wire contract.
func publish(t *testing.T, srv *spooltest.Server, typ, id, payload string) {
	t.Helper()
	subject, err := srv.Names.TaskSubject(spool.Normal, typ)
	if err != nil {
		t.Fatal(err)
	}
	msg := nats.NewMsg(subject)
	msg.Header.Set(spool.HeaderMsgID, id)
	msg.Data = []byte(payload)
	if _, err := srv.JS.PublishMsg(streamstest.Context(t), msg); err != nil {
		t.Fatal(err)
	}
}

// TestProgressReports: demo.progress reports its progress after each
// step, in order, on the task's progress events, then completes.
func TestProgressReports(t *testing.T) {
	t.Parallel()
	srv, sub := start(t, spool.EventFilter{Kind: spool.EventProgress, ID: "p1"})
	publish(t, srv, demo.Progress, "p1", `{"steps":4,"ms":20}`)

	for i := 1; i <= 4; i++ {
		m, err := sub.NextMsg(streamstest.Timeout)
		if err != nil {
			t.Fatalf("progress report %d of 4: %v", i, err)
		}
		var ev spool.Event
		if err := json.Unmarshal(m.Data, &ev); err != nil {
			t.Fatal(err)
		}
		p := ev.Task.Progress
		if ev.Event != spool.EventProgress || ev.Task.State != spool.StateProcessing || p == nil || p.Percent == nil {
			t.Fatalf("report %d: %s event, task %+v", i, ev.Event, ev.Task)
		}
		if want := float64(25 * i); *p.Percent != want {
			t.Errorf("report %d: percent %v, want %v", i, *p.Percent, want)
		}
		if want := fmt.Sprintf(`{"step":%d,"steps":4}`, i); string(p.Value) != want {
			t.Errorf("report %d: value %s, want %s", i, p.Value, want)
		}
	}
	srv.WaitDrained(t, streamstest.Timeout)
	if r := srv.Result(t, "p1"); r.State != spool.StateCompleted || string(r.Result) != `{"steps":4}` || r.Progress != nil {
		t.Fatalf("result %+v", r)
	}
}

// TestProgressRefusesBadPayloads: a payload outside the limits is a
// permanent error, and nothing is reported.
func TestProgressRefusesBadPayloads(t *testing.T) {
	t.Parallel()
	srv, sub := start(t, spool.EventFilter{Kind: spool.EventProgress, Type: demo.Progress})
	cases := map[string]string{
		"no-steps": `{"steps":0}`,
		"too-many": `{"steps":101}`,
		"too-long": `{"steps":2,"ms":3600000}`,
		"negative": `{"ms":-1}`,
		"not-json": `steps`,
	}
	for id, payload := range cases {
		publish(t, srv, demo.Progress, id, payload)
	}
	srv.WaitDrained(t, streamstest.Timeout)
	for id, payload := range cases {
		if r := srv.Result(t, id); r.State != spool.StateDead || r.Reason != spool.ReasonPermanent {
			t.Errorf("payload %s: %s (%s), want dead (permanent)", payload, r.State, r.Reason)
		}
	}
	// The worker published any report before its dead document: after a
	// round trip to the server, a report would be here.
	if err := srv.NC.Flush(); err != nil {
		t.Fatal(err)
	}
	if n, _, err := sub.Pending(); err != nil || n != 0 {
		t.Fatalf("%d progress reports for refused payloads (%v)", n, err)
	}
}
