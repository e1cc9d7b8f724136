package main

import (
	"context"
	"errors"
	"io"
	"runtime/pprof"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	spool "github.com/spoolq/spool/shared"
	"github.com/spoolq/spool/streams"
	"github.com/spoolq/spool/streams/streamstest"
)

// A worker whose server is gone still stops within SPOOL_SHUTDOWN_TIMEOUT
// of SIGTERM: a handler runs past the timeout, so its task's hand-back and
// every write after it meet a server that no longer answers.
func TestRunStopsWithinTimeoutWithServerGone(t *testing.T) {
	e := streamstest.Start(t, streams.Settings{})
	ctx := streamstest.Context(t)

	const shutdownTimeout = 2 * time.Second
	t.Setenv("SPOOL_NATS_URL", e.URL)
	t.Setenv("SPOOL_WORKER_NAME", "shutdown-test")
	t.Setenv("SPOOL_STATS_INTERVAL", "0")
	t.Setenv("SPOOL_PROCESSING_DELAY", "0")
	t.Setenv("SPOOL_SHUTDOWN_TIMEOUT", shutdownTimeout.String())
	var logs syncBuffer
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- run(runCtx, []string{"--demo"}, io.Discard, &logs) }()

	m := nats.NewMsg("spool.tasks.normal.demo.sleep")
	m.Header.Set(spool.HeaderTaskID, "long-1")
	m.Data = []byte(`{"ms":600000}`)
	if _, err := e.JS.PublishMsg(ctx, m); err != nil {
		t.Fatal(err)
	}
	// The processing state shows the handler is running; the log line
	// shows every part has started.
	kv, err := e.JS.KeyValue(ctx, "spool_results")
	if err != nil {
		t.Fatal(err)
	}
	streamstest.WaitFor(t, 20*time.Second, func() error {
		if !strings.Contains(logs.String(), "spool-consumer running") {
			return errors.New("not running yet")
		}
		en, err := kv.Get(ctx, "long-1")
		if err != nil {
			return err
		}
		if !strings.Contains(string(en.Value()), `"processing"`) {
			return errors.New("long-1 is not processing: " + string(en.Value()))
		}
		return nil
	})

	e.Server.Shutdown()
	e.Server.WaitForShutdown()
	start := time.Now()
	stop() // what SIGTERM does
	// The bound leaves room for a loaded machine; a hang is what it catches.
	limit := shutdownTimeout + 5*time.Second
	select {
	case err := <-done:
		if err != nil {
			t.Logf("run: %v", err)
		}
	case <-time.After(limit):
		var stacks strings.Builder
		_ = pprof.Lookup("goroutine").WriteTo(&stacks, 1)
		t.Errorf("run still stopping %s after SIGTERM, want at most %s; logs:\n%s\ngoroutines:\n%s", time.Since(start), limit, logs.String(), stacks.String())
		// The deferred cleanups need run to have ended.
		select {
		case <-done:
		case <-time.After(2 * time.Minute):
			t.Fatal("run never returned")
		}
	}
}
