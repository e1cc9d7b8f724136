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
// It takes one to two minutes; the deadline leaves room for a loaded
// machine.
func TestQuickRun(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), 4*time.Minute)
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
		"## Targets",
		"| processing c=10 ≥ 0.8× raw + results | ",
		"## Processing",
		"| R1 | 10 | ",
		"## Enqueue",
		"## Pickup",
		"## Priority shares",
		"## Backlog",
		"## Workflows",
		"## Flow control",
		"kept notes",
	} {
		if !strings.Contains(report, want) {
			t.Errorf("report lacks %q:\n%s", want, report)
		}
	}
	if strings.Contains(report, "old table") {
		t.Errorf("report kept the old table:\n%s", report)
	}
	// The quick run has every single-server scenario in one mode at one
	// concurrency: about 13.4 KB with the many-types and services
	// scenarios, where the format of one table row per figure and variant
	// wrote 13.5 KB without them.
	generated, _, _ := strings.Cut(report, notesMarker)
	if len(generated) > quickReportMax {
		t.Errorf("the quick run's report is %d bytes, more than %d", len(generated), quickReportMax)
	}
	// Its figures are beside it, and -render writes the same report.
	again := filepath.Join(t.TempDir(), "again.md")
	if err := renderFile(sidecarPath(cfg.out), again); err != nil {
		t.Fatal(err)
	}
	b2, err := os.ReadFile(again)
	if err != nil {
		t.Fatal(err)
	}
	if string(b2)+"\n" != generated {
		t.Errorf("-render wrote another report:\n%s\nwant:\n%s", b2, generated)
	}
}

// quickReportMax bounds the generated part of the quick run's report.
const quickReportMax = 14_500
