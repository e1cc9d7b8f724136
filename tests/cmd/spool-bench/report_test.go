package main

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestTargetVerdicts renders a run with two processing figures: one target
// met, one not, the others not measured; a row no table knows is shown
// under its full name.
func TestTargetVerdicts(t *testing.T) {
	t.Parallel()
	res := newResults()
	res.modes = []string{"default sync"}
	for _, f := range []struct {
		row, variant string
		v            float64
	}{
		{"processing: 500 queued, concurrency 10 (tasks/s)", "raw-results", 1000},
		{"processing: 500 queued, concurrency 10 (tasks/s)", "spool", 850},
		{"processing: 500 queued, concurrency 100 (tasks/s)", "raw-results", 1000},
		{"processing: 500 queued, concurrency 100 (tasks/s)", "spool", 500},
		{"a new scenario: its figure (tasks/s)", "spool", 42},
	} {
		res.add("default sync", f.row, f.variant, f.v)
	}
	report := string(renderReport(res.snapshot(defaultConfig(true), time.Second)))
	total := len(newReport(res.snapshot(defaultConfig(true), time.Second)).targetList())
	for _, want := range []string{
		"| processing c=10 ≥ 0.8× raw + results | met | 0.85 | 850 / 1,000 tasks/s |",
		"| processing c=100 ≥ 0.9× raw + results | not met | 0.50 | 500 / 1,000 tasks/s |",
		"| per-key limit 1 ≥ 0.7× unlimited | not measured |  |  |",
		"| default sync | a new scenario: its figure (tasks/s) | spool 42.0 |",
	} {
		if !strings.Contains(report, want) {
			t.Errorf("report lacks %q:\n%s", want, report)
		}
	}
	summary := "Targets: 1 met, 1 not met, " + strconv.Itoa(total-2) + " not measured"
	if !strings.Contains(report, summary) {
		t.Errorf("report lacks the summary %q:\n%s", summary, report)
	}
}

// TestBenchmarksFile checks the repository's BENCHMARKS.md: its generated
// part is the report of the figures beside it, at most 25 KB (a full run
// with every peer and variant writes about 24.8 KB), and the whole file with
// its notes at most 30 KB.
func TestBenchmarksFile(t *testing.T) {
	t.Parallel()
	root := filepath.Join("..", "..", "..")
	f, err := readFigures(filepath.Join(root, "BENCHMARKS.json"))
	if err != nil {
		t.Fatal(err)
	}
	report := renderReport(f)
	if len(report) > 25_000 {
		t.Errorf("the report of the last run is %d bytes, more than 25,000", len(report))
	}
	b, err := os.ReadFile(filepath.Join(root, "BENCHMARKS.md"))
	if err != nil {
		t.Fatal(err)
	}
	if len(b) > 30_000 {
		t.Errorf("BENCHMARKS.md is %d bytes, more than 30,000", len(b))
	}
	generated, _, ok := strings.Cut(string(b), notesMarker)
	if !ok {
		t.Fatal("BENCHMARKS.md has no notes marker")
	}
	if generated != string(report)+"\n" {
		t.Errorf("BENCHMARKS.md is not the report of BENCHMARKS.json: run go run ./tests/cmd/spool-bench -render BENCHMARKS.json -out BENCHMARKS.md")
	}
}
