package main

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// TestQuickCluster runs the cluster scenario (default sync, the leader
// change by step-down only) and the
// partitions scenario once with tiny counts on a local 3-node cluster, so
// that harness cannot rot either. It checks the rows, not the figures,
// except what is not a speed: the partition leaders sit on as many
// servers as there are partitions.
func TestQuickCluster(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	cfg := defaultConfig(true)
	cfg.only, cfg.cluster, cfg.scenarios = "default", true, "cluster,partitions"
	cfg.leaderN, cfg.leaderKill = 500, false
	res := newResults()
	log := slog.New(slog.NewTextHandler(t.Output(), nil))
	if err := runCluster(ctx, cfg, false, res, log); err != nil {
		t.Fatal(err)
	}
	if err := runPartitions(ctx, cfg, res, log); err != nil {
		t.Fatal(err)
	}
	for mode, rows := range map[string][]string{
		clusterMode(false): {
			"enqueue: streaming (tasks/s)",
			"processing: 500 queued, concurrency 10 (tasks/s)",
			"pickup at 200 tasks/s: p99 (µs)",
			"shares: largest deviation from the weights (pp)",
			"leader change, step-down of the task stream leader: longest gap between completions (ms)",
		},
		"cluster R3, task partitions": {
			"3 partitions: enqueue, PublishAsync over 32 types (tasks/s)",
			"3 partitions: processing, concurrency 100 per partition (tasks/s)",
			"3 partitions: processing, one worker pulling every partition, concurrency 100 (tasks/s)",
			"3 partitions: processing, one worker pulling every partition, concurrency 300 (tasks/s)",
		},
	} {
		for _, row := range rows {
			variants := []string{"raw", "spool"}
			switch {
			case strings.Contains(row, "PublishAsync"):
				variants = variants[:1] // raw publishing only
			case strings.Contains(row, "one worker"):
				variants = variants[1:] // Spool only
			}
			for _, variant := range variants {
				if _, n := res.median(mode, row, variant); n == 0 {
					t.Errorf("%s: no %s figure for %q", mode, variant, row)
				}
			}
		}
	}
	for _, k := range partitionCounts {
		row := fmt.Sprintf("%d partitions: servers leading a task partition", k)
		if k == 1 {
			row = "1 partition: servers leading a task partition"
		}
		if got, _ := res.median("cluster R3, task partitions", row, "raw"); int(got) != k {
			t.Errorf("%d partitions led by %v servers, want %d", k, got, k)
		}
	}
}
