package producer_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/spoolq/spool/producer"
	spool "github.com/spoolq/spool/shared"
	"github.com/spoolq/spool/streams"
)

func TestEnqueueStoresWireContract(t *testing.T) {
	t.Parallel()
	e := startEnv(t)
	ctx := ctxFor(t)
	task := producer.Task{
		Type:        "email.send",
		Priority:    new(spool.High),
		Payload:     []byte(`{"to":"a@example.com"}`),
		ID:          "order-42",
		MaxRetries:  new(0),
		Timeout:     90 * time.Second,
		UniqueKey:   "user:7 welcome",
		UniqueTTL:   time.Minute,
		Headers:     map[string]string{"X-Tenant": "acme"},
		TraceParent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
		TraceState:  "vendor=1",
	}
	res, err := e.client.Enqueue(ctx, task)
	if err != nil {
		t.Fatalf("enqueue: %v", err)
	}
	if res.ID != "order-42" || res.Duplicate || res.Scheduled || res.Sequence == 0 || res.Subject != "spool.tasks.high.email.send" {
		t.Fatalf("result %+v", res)
	}
	msg, err := e.tasks.GetMsg(ctx, res.Sequence)
	if err != nil {
		t.Fatal(err)
	}
	if msg.Subject != "spool.tasks.high.email.send" || string(msg.Data) != `{"to":"a@example.com"}` {
		t.Fatalf("stored %q %q", msg.Subject, msg.Data)
	}
	want := map[string]string{
		spool.HeaderTaskID:      "", // an immediate task's id is in Nats-Msg-Id alone
		spool.HeaderMsgID:       "order-42",
		spool.HeaderMaxRetries:  "0",
		spool.HeaderTimeout:     "1m30s",
		spool.HeaderUniqueKey:   "user:7 welcome",
		spool.HeaderUniqueTTL:   "1m0s",
		spool.HeaderTraceParent: task.TraceParent,
		spool.HeaderTraceState:  "vendor=1",
		"X-Tenant":              "acme",
	}
	for k, v := range want {
		if got := msg.Header.Get(k); got != v {
			t.Errorf("header %s = %q, want %q", k, got, v)
		}
	}
	meta, err := spool.DecodeMeta(msg.Header)
	if err != nil || meta.ID != "order-42" || *meta.MaxRetries != 0 {
		t.Fatalf("DecodeMeta: %+v, %v", meta, err)
	}
	if holder, ok := e.uniqueHolder(t, "user:7 welcome"); !ok || holder != "order-42" {
		t.Fatalf("unique key holder %q, %v", holder, ok)
	}
}

func TestEnqueueGeneratesTimeOrderedIDs(t *testing.T) {
	t.Parallel()
	e := startEnv(t)
	ctx := ctxFor(t)
	var prev string
	for range 3 {
		res, err := e.client.Enqueue(ctx, producer.NewTask("report", nil))
		if err != nil {
			t.Fatal(err)
		}
		if err := spool.ValidateID(res.ID); err != nil || len(res.ID) != 26 {
			t.Fatalf("generated id %q: %v", res.ID, err)
		}
		if res.ID[:10] < prev { // the first 10 characters are the millisecond
			t.Fatalf("id %q sorts before an earlier id's time %q", res.ID, prev)
		}
		if res.Subject != "spool.tasks.normal.report" {
			t.Fatalf("NewTask priority: subject %s", res.Subject)
		}
		prev = res.ID[:10]
	}
}

func TestEnqueueSameIDTwiceStoresOnce(t *testing.T) {
	t.Parallel()
	e := startEnv(t)
	ctx := ctxFor(t)
	task := producer.NewTask("invoice", []byte("x"))
	first, err := e.client.Enqueue(ctx, task, producer.TaskID("inv-1"))
	if err != nil {
		t.Fatal(err)
	}
	second, err := e.client.Enqueue(ctx, task, producer.TaskID("inv-1"))
	if err != nil {
		t.Fatal(err)
	}
	if first.Duplicate || !second.Duplicate || second.Sequence != first.Sequence {
		t.Fatalf("first %+v second %+v", first, second)
	}
	if n := e.streamMsgs(t); n != 1 {
		t.Fatalf("stream holds %d messages, want 1", n)
	}
}

func TestEnqueueRejectsBadInput(t *testing.T) {
	t.Parallel()
	e := startEnv(t)
	ctx := ctxFor(t)
	big := make([]byte, 1<<20) // the stream's default max message size; headers push it over
	tests := []struct {
		name      string
		task      producer.Task
		wantErr   error
		wantField string
	}{
		{"priority", producer.Task{Type: "a", Priority: new(spool.Priority(9))}, producer.ErrInvalidPriority, "priority"},
		{"empty type", producer.Task{Type: ""}, producer.ErrInvalidType, "type"},
		{"type with space", producer.Task{Type: "a b"}, producer.ErrInvalidType, "type"},
		{"type empty token", producer.Task{Type: "a..b"}, producer.ErrInvalidType, "type"},
		{"type wildcard", producer.Task{Type: "a.>"}, producer.ErrInvalidType, "type"},
		{"id with dot", producer.Task{Type: "a", ID: "x.y"}, producer.ErrInvalidID, "id"},
		{"id too long", producer.Task{Type: "a", ID: strings.Repeat("x", 129)}, producer.ErrInvalidID, "id"},
		{"payload too large", producer.Task{Type: "a", Payload: big}, producer.ErrPayloadTooLarge, "payload"},
		{"negative delay", producer.Task{Type: "a", Delay: -time.Second}, producer.ErrInvalidDelay, "delay"},
		{"delay and process-at", producer.Task{Type: "a", Delay: time.Second, ProcessAt: time.Now().Add(time.Hour)}, producer.ErrInvalidDelay, "delay"},
		{"negative retries", producer.Task{Type: "a", MaxRetries: new(-1)}, producer.ErrInvalidMaxRetries, "max_retries"},
		{"too many retries", producer.Task{Type: "a", MaxRetries: new(1001)}, producer.ErrInvalidMaxRetries, "max_retries"},
		{"negative timeout", producer.Task{Type: "a", Timeout: -time.Second}, producer.ErrInvalidTimeout, "timeout"},
		{"timeout too long", producer.Task{Type: "a", Timeout: 25 * time.Hour}, producer.ErrInvalidTimeout, "timeout"},
		{"unique without ttl", producer.Task{Type: "a", UniqueKey: "k"}, producer.ErrInvalidUnique, "unique_ttl"},
		{"unique ttl without key", producer.Task{Type: "a", UniqueTTL: time.Minute}, producer.ErrInvalidUnique, "unique_key"},
		{"unique key too long", producer.Task{Type: "a", UniqueKey: strings.Repeat("k", 257), UniqueTTL: time.Minute}, producer.ErrInvalidUnique, "unique_key"},
		{"header CRLF", producer.Task{Type: "a", Headers: map[string]string{"X-A": "1\r\nX-B: 2"}}, producer.ErrInvalidHeader, "headers"},
		{"header bad name", producer.Task{Type: "a", Headers: map[string]string{"X A": "1"}}, producer.ErrInvalidHeader, "headers"},
		{"header reserved Nats-", producer.Task{Type: "a", Headers: map[string]string{"Nats-TTL": "1s"}}, producer.ErrInvalidHeader, "headers"},
		{"header reserved Spool-", producer.Task{Type: "a", Headers: map[string]string{"spool-task-id": "x"}}, producer.ErrInvalidHeader, "headers"},
		{"traceparent CRLF", producer.Task{Type: "a", TraceParent: "00\r\n"}, producer.ErrInvalidHeader, "traceparent"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := e.client.Enqueue(ctx, tt.task)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("want %v, got %v", tt.wantErr, err)
			}
			var inv *producer.InvalidTaskError
			if !errors.As(err, &inv) || inv.Field != tt.wantField {
				t.Fatalf("want field %q, got %v", tt.wantField, err)
			}
		})
	}
	// Header errors are header errors whatever their kind.
	_, err := e.client.Enqueue(ctx, producer.Task{Type: "a", Timeout: -1})
	if !errors.Is(err, producer.ErrInvalidHeader) {
		t.Errorf("timeout error %v is not an ErrInvalidHeader", err)
	}
	if n := e.streamMsgs(t); n != 0 {
		t.Fatalf("bad tasks published %d messages", n)
	}
}

func TestEnqueuePayloadAtTheLimit(t *testing.T) {
	t.Parallel()
	e := startEnv(t)
	ctx := ctxFor(t)
	// Find the smallest payload the client refuses (with one-character ids).
	// Refused tasks are never published; accepted ones repeat id "a" and
	// are stored once.
	size := 1<<20 - 100
	for ; ; size++ {
		_, err := e.client.Enqueue(ctx, producer.NewTask("blob", make([]byte, size)), producer.TaskID("a"))
		if errors.Is(err, producer.ErrPayloadTooLarge) {
			break
		}
		if err != nil {
			t.Fatalf("payload %d: %v", size, err)
		}
	}
	// One byte less is stored by the server...
	if _, err := e.client.Enqueue(ctx, producer.NewTask("blob", make([]byte, size-1)), producer.TaskID("b")); err != nil {
		t.Fatalf("payload %d: %v", size-1, err)
	}
	// ...and the refused size is refused by the server too: the client's
	// limit is the server's.
	m := nats.NewMsg("spool.tasks.normal.blob")
	m.Header.Set(spool.HeaderTaskID, "c")
	m.Header.Set(spool.HeaderMsgID, "c")
	m.Data = make([]byte, size)
	if _, err := e.js.PublishMsg(ctx, m); err == nil {
		t.Fatalf("server accepted %d bytes the client refused", size)
	}
	if n := e.streamMsgs(t); n != 2 {
		t.Fatalf("stream holds %d", n)
	}
}

func TestNewValidatesOptions(t *testing.T) {
	t.Parallel()
	e := startEnv(t)
	for _, opt := range []producer.Option{
		producer.WithPrefix("bad.prefix"),
		producer.WithTimeout(0),
		producer.WithPublishWindow(0),
		producer.WithNames(spool.Names{}),
	} {
		if _, err := producer.New(e.nc, opt); err == nil {
			t.Errorf("option accepted")
		}
	}
	if _, err := producer.New(nil); err == nil {
		t.Error("nil conn accepted")
	}
}

func TestEnqueueWithoutProvisioning(t *testing.T) {
	t.Parallel()
	e := startEnv(t)
	c, err := producer.New(e.nc, producer.WithPrefix("other"))
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Enqueue(ctxFor(t), producer.NewTask("a", nil))
	if !errors.Is(err, producer.ErrNotProvisioned) {
		t.Fatalf("want ErrNotProvisioned, got %v", err)
	}
}

func TestEnqueueUnderAnotherPrefix(t *testing.T) {
	t.Parallel()
	e := startEnv(t)
	ctx := ctxFor(t)
	names, err := spool.NewNames("acme")
	if err != nil {
		t.Fatal(err)
	}
	topo, err := streams.New(names, streams.Settings{})
	if err != nil {
		t.Fatal(err)
	}
	if err := streams.Provision(ctx, e.js, topo, testLogger(t)); err != nil {
		t.Fatal(err)
	}
	c, err := producer.New(e.nc, producer.WithNames(names))
	if err != nil {
		t.Fatal(err)
	}
	res, err := c.Enqueue(ctx, producer.NewTask("x", nil), producer.ProcessIn(time.Hour))
	if err != nil || res.Subject != "acme.sched."+res.ID {
		t.Fatalf("%+v, %v", res, err)
	}
	res, err = c.Enqueue(ctx, producer.NewTask("x", nil), producer.Unique("k", time.Minute))
	if err != nil || res.Subject != "acme.tasks.normal.x" {
		t.Fatalf("%+v, %v", res, err)
	}
	s, err := e.js.Stream(ctx, "ACME_TASKS")
	if err != nil {
		t.Fatal(err)
	}
	if n := s.CachedInfo().State.Msgs; n != 2 {
		t.Fatalf("ACME_TASKS holds %d", n)
	}
	if n := e.streamMsgs(t); n != 0 {
		t.Fatalf("SPOOL_TASKS holds %d", n)
	}
}

func TestEnqueueWithDoneContextPublishesNothing(t *testing.T) {
	t.Parallel()
	e := startEnv(t)
	ctx, cancel := context.WithCancel(ctxFor(t))
	cancel()
	if _, err := e.client.Enqueue(ctx, producer.NewTask("x", nil)); !errors.Is(err, context.Canceled) {
		t.Fatalf("want context.Canceled, got %v", err)
	}
	if n := e.streamMsgs(t); n != 0 {
		t.Fatalf("stream holds %d", n)
	}
}

// The zero Task is a normal-priority task, as on the wire and in the CLI
// and the broker; an explicit priority, Critical included, is kept.
func TestZeroTaskIsNormal(t *testing.T) {
	t.Parallel()
	e := startEnv(t)
	ctx := ctxFor(t)
	for _, c := range []struct {
		task producer.Task
		want string
	}{
		{producer.Task{Type: "zero"}, "spool.tasks.normal.zero"},
		{producer.NewTask("new", nil), "spool.tasks.normal.new"},
		{producer.Task{Type: "crit", Priority: new(spool.Critical)}, "spool.tasks.critical.crit"},
	} {
		res, err := e.client.Enqueue(ctx, c.task)
		if err != nil || res.Subject != c.want {
			t.Errorf("%+v: %+v, %v; want %s", c.task, res, err, c.want)
		}
	}
	res, err := e.client.Enqueue(ctx, producer.Task{Type: "opt"}, producer.AtPriority(spool.Critical))
	if err != nil || res.Subject != "spool.tasks.critical.opt" {
		t.Errorf("AtPriority(Critical): %+v, %v", res, err)
	}
}
