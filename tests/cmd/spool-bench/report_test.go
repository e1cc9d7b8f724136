package main

import (
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
