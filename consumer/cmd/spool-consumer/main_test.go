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
