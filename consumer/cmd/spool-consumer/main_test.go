package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"

	spool "github.com/spoolq/spool/shared"
	"github.com/spoolq/spool/shared/fleet"
	"github.com/spoolq/spool/streams"
	"github.com/spoolq/spool/streams/embedded"
	"github.com/spoolq/spool/streams/streamstest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// syncBuffer collects a binary's output while it runs.
type syncBuffer = streamstest.SyncBuffer

// The binary's run, with --demo, processes demo tasks from any publisher
// and stops gracefully when its context (SIGINT/SIGTERM in main) ends.
func TestRunDemo(t *testing.T) {
	srv, err := embedded.Start(embedded.Options{StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Shutdown(); srv.WaitForShutdown() })
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	topo, err := streams.New(spool.DefaultNames(), streams.Settings{})
	if err != nil {
		t.Fatal(err)
	}
	if err := streams.Provision(ctx, js, topo, slog.New(slog.DiscardHandler)); err != nil {
		t.Fatal(err)
	}

	t.Setenv("SPOOL_NATS_URL", srv.ClientURL())
	t.Setenv("SPOOL_RETRY_BASE", "10ms")
	t.Setenv("SPOOL_RETRY_MAX", "20ms")
	t.Setenv("SPOOL_STATS_INTERVAL", "50ms")
	t.Setenv("SPOOL_WORKER_NAME", "bin-test")
	var logs syncBuffer
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- run(runCtx, []string{"--demo"}, io.Discard, &logs) }()

	for _, task := range []struct{ subject, id, payload string }{
		{"spool.tasks.high.demo.echo", "e1", `{"x":1}`},
		{"spool.tasks.low.demo.fail", "f1", `{"fail_times":1}`},
		{"spool.tasks.idle.demo.sleep", "s1", `{"ms":5}`},
	} {
		m := nats.NewMsg(task.subject)
		m.Header.Set(spool.HeaderTaskID, task.id)
		m.Data = []byte(task.payload)
		if _, err := js.PublishMsg(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	kv, err := js.KeyValue(ctx, "spool_results")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"e1": `{"x":1}`, "f1": `{"attempts":2}`, "s1": `{"slept_ms":5}`}
	deadline := time.Now().Add(20 * time.Second)
	for id, result := range want {
		for {
			if time.Now().After(deadline) {
				t.Fatalf("task %s not completed; logs:\n%s", id, logs.String())
			}
			var doc spool.Result
			if e, err := kv.Get(ctx, id); err == nil && json.Unmarshal(e.Value(), &doc) == nil && doc.State == spool.StateCompleted {
				if string(doc.Result) != result || doc.Worker != "bin-test" {
					t.Errorf("%s: %+v", id, doc)
				}
				break
			}
			select {
			case <-time.After(5 * time.Millisecond):
			case <-ctx.Done():
				t.Fatal(ctx.Err())
			}
		}
	}
	stop() // what SIGTERM does
	if err := <-done; err != nil {
		t.Fatalf("run: %v", err)
	}
	out := logs.String()
	for _, want := range []string{"spool-consumer running", "slots", "worker stopped", "final stats"} {
		if !strings.Contains(out, want) {
			t.Errorf("logs lack %q:\n%s", want, out)
		}
	}
}

func TestRunRefusesBadConfig(t *testing.T) {
	t.Setenv("SPOOL_CONCURRENCY_MIN", "0")
	err := run(t.Context(), nil, io.Discard, &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), "SPOOL_CONCURRENCY_MIN") {
		t.Fatalf("err %v, want one naming SPOOL_CONCURRENCY_MIN", err)
	}
	var out bytes.Buffer
	if err := run(t.Context(), []string{"-h"}, &out, io.Discard); !errors.Is(err, flag.ErrHelp) || !strings.Contains(out.String(), "SPOOL_WEIGHTS") {
		t.Fatalf("help: %v\n%s", err, out.String())
	}
}

// With SPOOL_REMOTE_ROUTES and no Go handler, the binary serves types by
// pattern with a responder on another connection (any language would do),
// returns its bytes faithfully, leaves a type no route serves queued and
// reports each route in its stats.
func TestRunRemoteRoutes(t *testing.T) {
	e := streamstest.Start(t, streams.Settings{})
	ctx := streamstest.Context(t)
	responder := e.Connect(t)
	all := make([]byte, 256)
	for i := range all {
		all[i] = byte(i)
	}
	sub, err := responder.QueueSubscribe("handlers.>", "handlers", func(m *nats.Msg) {
		reply := nats.NewMsg(m.Reply)
		switch m.Header.Get("Spool-Task-Type") {
		case "img.thumb":
			reply.Data = all
		default:
			reply.Header.Set("Spool-Error", "cannot do "+m.Subject)
			reply.Header.Set("Spool-Permanent", "true")
		}
		_ = m.RespondMsg(reply)
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := responder.Flush(); err != nil {
		t.Fatal(err)
	}

	t.Setenv("SPOOL_NATS_URL", e.URL)
	t.Setenv("SPOOL_WORKER_NAME", "remote-test")
	t.Setenv("SPOOL_STATS_INTERVAL", "0")
	t.Setenv("SPOOL_METRICS_ADDR", "off")
	t.Setenv("SPOOL_REMOTE_ROUTES", "img.*=handlers.{type};concurrency=2;timeout=5s,other.>=handlers.other")
	var logs syncBuffer
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- run(runCtx, nil, io.Discard, &logs) }()

	for _, task := range []struct{ subject, id string }{
		{"spool.tasks.high.img.thumb", "thumb-1"},
		{"spool.tasks.normal.other.x.y", "other-1"},
		{"spool.tasks.normal.unrouted", "none-1"},
	} {
		m := nats.NewMsg(task.subject)
		m.Header.Set(spool.HeaderTaskID, task.id)
		if _, err := e.JS.PublishMsg(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	kv, err := e.JS.KeyValue(ctx, "spool_results")
	if err != nil {
		t.Fatal(err)
	}
	docs := map[string]spool.Result{}
	streamstest.WaitFor(t, 20*time.Second, func() error {
		for _, id := range []string{"thumb-1", "other-1"} {
			var doc spool.Result
			en, err := kv.Get(ctx, id)
			if err != nil {
				return err
			}
			if err := json.Unmarshal(en.Value(), &doc); err != nil {
				return err
			}
			if !doc.State.Terminal() {
				return errors.New(id + " is " + string(doc.State))
			}
			docs[id] = doc
		}
		return nil
	})
	if out, err := docs["thumb-1"].Output(); err != nil || !bytes.Equal(out, all) || docs["thumb-1"].ResultEncoding != "base64" {
		t.Errorf("thumb-1: output %q, %v, %+v", out, err, docs["thumb-1"])
	}
	if d := docs["other-1"]; d.State != spool.StateDead || d.Reason != spool.ReasonPermanent || !strings.Contains(d.Error, "cannot do handlers.other") {
		t.Errorf("other-1: %+v", d)
	}
	// Pulling by type, the default, a type no route serves waits in the
	// queue: nothing delivers it, so nothing dead-letters it.
	if en, err := kv.Get(ctx, "none-1"); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Errorf("none-1, of a type no route serves: result %v, %v; want none", en, err)
	}
	tasks, err := e.JS.Stream(ctx, "SPOOL_TASKS")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tasks.GetLastMsgForSubject(ctx, "spool.tasks.normal.unrouted"); err != nil {
		t.Errorf("none-1, of a type no route serves, is not queued: %v", err)
	}

	// The stats document lists each route with its counters.
	var stats fleet.WorkerStats
	streamstest.WaitFor(t, 10*time.Second, func() error {
		info, err := e.NC.RequestWithContext(ctx, "$SRV.INFO.spool-consumer", nil)
		if err != nil {
			return err
		}
		var si struct {
			ID       string            `json:"id"`
			Metadata map[string]string `json:"metadata"`
		}
		if err := json.Unmarshal(info.Data, &si); err != nil {
			return err
		}
		if si.Metadata[fleet.MetadataHandlers] != "img.*,other.>" {
			return errors.New("handlers metadata " + si.Metadata[fleet.MetadataHandlers])
		}
		reply, err := e.NC.RequestWithContext(ctx, "spool.svc.consumer.remote-test."+si.ID+".stats", nil)
		if err != nil {
			return err
		}
		return json.Unmarshal(reply.Data, &stats)
	})
	want := []fleet.RemoteRouteStats{
		{Pattern: "img.*", Subject: "handlers.{type}", Concurrency: 2, TimeoutNS: int64(5 * time.Second), Calls: 1, Completed: 1},
		{Pattern: "other.>", Subject: "handlers.other", Calls: 1, Failed: 1},
	}
	if len(stats.Remote) != 2 || stats.Remote[0] != want[0] || stats.Remote[1] != want[1] {
		t.Errorf("remote stats %+v, want %+v", stats.Remote, want)
	}
	stop()
	if err := <-done; err != nil {
		t.Fatalf("run: %v\n%s", err, logs.String())
	}
	if !strings.Contains(logs.String(), "remote handler route") {
		t.Errorf("logs lack the routes:\n%s", logs.String())
	}
}
