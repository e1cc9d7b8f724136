package admin_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	spool "github.com/spoolq/spool/shared"
	"github.com/spoolq/spool/shared/fleet"
	"github.com/spoolq/spool/shared/workflow"
	"github.com/spoolq/spool/streams"
	"github.com/spoolq/spool/streams/admin"
	"github.com/spoolq/spool/streams/streamstest"
)

// Where workers pull by type, a type is served when a type consumer of any
// priority matches it, and the overview lists the queued types no
// consumer delivers.
func TestServingByType(t *testing.T) {
	t.Parallel()
	e := streamstest.Start(t, streams.Settings{Consumers: streams.ConsumersByType})
	c := newClient(t, e)
	ctx := streamstest.Context(t)

	sv, err := c.Serving(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if msg := sv.Unserved("sv.b"); !strings.Contains(msg, "no worker serves any task type yet") {
		t.Errorf("no type consumer: %q", msg)
	}

	// What a worker in any language does: make the consumer of the pattern
	// it serves, here of one priority only.
	tasks := e.Stream(t, e.Names.TaskStream())
	for _, pattern := range []string{"sv.a.*", workflow.SubmitType} {
		cfg := streams.TypeConsumerConfig(e.Names, tasks.CachedInfo().Config, spool.High, pattern)
		if _, err := tasks.CreateConsumer(ctx, cfg); err != nil {
			t.Fatal(err)
		}
	}
	for range 2 {
		if _, err := e.JS.Publish(ctx, "spool.tasks.normal.sv.b", []byte("{}")); err != nil {
			t.Fatal(err)
		}
	}
	sv, err = c.Serving(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if sv.Consumers != streams.ConsumersByType || strings.Join(sv.Patterns, ",") != workflow.SubmitType+",sv.a.*" {
		t.Errorf("serving %+v, want the patterns sv.a.* and the workflow submissions by type", sv)
	}
	if msg := sv.Unserved("sv.a.x"); msg != "" {
		t.Errorf("served type: %q", msg)
	}
	if msg := sv.Unserved("sv.b"); !strings.Contains(msg, `no worker serves type "sv.b" (workers serve sv.a.*)`) || !strings.Contains(msg, "wait in the queue") {
		t.Errorf("unserved type: %q", msg)
	}

	ov, err := c.Overview(ctx)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := json.Marshal(ov)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Consumers string `json:"consumers"`
		Unserved  []struct {
			Type       string `json:"type"`
			Priority   string `json:"priority"`
			Queued     uint64 `json:"queued"`
			OldestWait int64  `json:"oldest_wait_ns"`
		} `json:"unserved"`
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	if doc.Consumers != "type" || len(doc.Unserved) != 1 {
		t.Fatalf("overview %s: want consumers type and one unserved type", raw)
	}
	if u := doc.Unserved[0]; u.Type != "sv.b" || u.Priority != "normal" || u.Queued != 2 || u.OldestWait <= 0 {
		t.Errorf("unserved %+v in %s", u, raw)
	}
}

// Where workers pull by priority, the running processes' service metadata
// says what they serve; with none running the answer says so, and a
// process that lists no types may serve any.
func TestServingByPriority(t *testing.T) {
	t.Parallel()
	e := streamstest.Start(t, streams.Settings{Consumers: streams.ConsumersByPriority})
	c := newClient(t, e, admin.WithFleetWait(5*time.Second))
	ctx := streamstest.Context(t)

	start := time.Now()
	sv, err := c.Serving(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if waited := time.Since(start); waited > 4*time.Second {
		t.Errorf("an empty fleet took %s: no responders should end the wait", waited)
	}
	if msg := sv.Unserved("sv.y"); sv.Workers != 0 || !strings.Contains(msg, "no worker is running") {
		t.Errorf("no fleet: %+v %q", sv, msg)
	}

	nc := e.Connect(t)
	addServer(t, nc, map[string]string{fleet.MetadataHandlers: "sv.x,sv.p.>"})
	addServer(t, nc, map[string]string{fleet.MetadataHandlers: "sv.z"})
	sv, err = c.Serving(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if sv.Workers != 2 || sv.Any || strings.Join(sv.Patterns, ",") != "sv.p.>,sv.x,sv.z" {
		t.Errorf("serving %+v", sv)
	}
	for _, typ := range []string{"sv.x", "sv.p.q.r", "sv.z"} {
		if msg := sv.Unserved(typ); msg != "" {
			t.Errorf("served type %s: %q", typ, msg)
		}
	}
	want := `no worker serves type "sv.y" (the 2 running serve sv.p.>, sv.x, sv.z): its tasks will be dead-lettered with reason no_handler`
	if msg := sv.Unserved("sv.y"); msg != want {
		t.Errorf("unserved type:\n got %q\nwant %q", msg, want)
	}

	addServer(t, nc, nil)
	sv, err = c.Serving(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !sv.Any || sv.Workers != 3 || sv.Unserved("sv.y") != "" {
		t.Errorf("a process listing no types: %+v", sv)
	}
}

// addServer registers a consumer process with metadata on nc, stopped when
// the test ends, and waits until the server holds its subscriptions.
func addServer(t *testing.T, nc *nats.Conn, metadata map[string]string) {
	t.Helper()
	svc, err := micro.AddService(nc, micro.Config{Name: fleet.ServiceName, Version: "0.0.1", Metadata: metadata})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = svc.Stop() })
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
}
