package main

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/spoolq/spool/streams/streamstest"
)

// TestMain lets the test binary play the harness's children (it re-runs
// its own executable with childEnv set, as the harness binary does).
func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		os.Exit(runChild(os.Args[1:]))
	}
	goleak.VerifyTestMain(m, streamstest.ServerGoroutines()...)
}

// TestQuickRun runs every scenario once with tiny counts under the default
// sync, so the harness cannot rot. It checks the report, not the figures.
func TestQuickRun(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	cfg := defaultConfig(true)
	cfg.only = "default"
	cfg.out = filepath.Join(t.TempDir(), "BENCHMARKS.md")
	if err := os.WriteFile(cfg.out, []byte("old table\n"+notesMarker+"\nkept notes\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := run(ctx, cfg, slog.New(slog.NewTextHandler(t.Output(), nil))); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(cfg.out)
	if err != nil {
		t.Fatal(err)
	}
	report := string(b)
	for _, want := range []string{
		"## default sync",
		"enqueue: streaming (tasks/s)",
		"enqueue: batches waited one by one (tasks/s)",
		"| raw, bounded |",
		"## Targets",
		"processing: 500 queued, concurrency 10 (tasks/s)",
		"pickup at 200 tasks/s: p99 (µs)",
		"shares: largest deviation from the weights (pp)",
		"backlog: 1000 queued, consumer RSS (MiB)",
		"backlog: throughput at 1000 queued / at 300",
		"network writes per task: consumer, concurrency 10",
		"CPU per task: consumer, concurrency 10 (µs)",
		"kept notes",
	} {
		if !strings.Contains(report, want) {
			t.Errorf("report lacks %q:\n%s", want, report)
		}
	}
	if strings.Contains(report, "old table") {
		t.Errorf("report kept the old table:\n%s", report)
	}
}
