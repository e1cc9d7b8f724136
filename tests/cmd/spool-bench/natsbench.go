package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
)

// natsBench cross-checks the raw baselines with the nats CLI's own
// benchmark against the same server (skipped when the CLI is not built:
// make tools): asynchronous publishes in batches of 500 (its default),
// and a durable consumer's callback with pulls of 500 and explicit acks,
// then the same with every ack confirmed (--doubleack). Its stream is the
// CLI's own (limits retention), created for the run and deleted after.
func (b *bench) natsBench(ctx context.Context) error {
	cli, err := exec.LookPath("bin/nats")
	if err != nil {
		if cli, err = exec.LookPath("nats"); err != nil {
			b.log.Warn("nats CLI not found (make tools); skipping the nats bench cross-check")
			return nil
		}
	}
	n := strconv.Itoa(b.cfg.batchN)
	if b.mode == "SyncAlways" {
		n = strconv.Itoa(b.cfg.batchNAlw)
	}
	const stream = "spool_bench_natsbench"
	defer func() { _ = b.js.DeleteStream(context.WithoutCancel(ctx), stream) }()
	run := func(row string, args ...string) error {
		f, err := os.CreateTemp("", "spool-bench-natsbench-*.csv")
		if err != nil {
			return fmt.Errorf("nats bench: %w", err)
		}
		csv := f.Name()
		defer os.Remove(csv)
		if err := f.Close(); err != nil {
			return fmt.Errorf("nats bench: %w", err)
		}
		args = append([]string{"-s", b.srv.url, "bench", "js"}, args...)
		args = append(args, "--stream", stream, "--msgs", n, "--size", "128B", "--no-progress", "--csv", csv)
		out, err := exec.CommandContext(ctx, cli, args...).CombinedOutput()
		if err != nil {
			return fmt.Errorf("nats %s: %w: %s", strings.Join(args, " "), err, out)
		}
		rate, err := csvRate(csv)
		if err != nil {
			return err
		}
		b.add(row, "raw", rate)
		return nil
	}
	if err := run("cross-check: nats bench js pub async, batches of 500 (msgs/s)", "pub", "async", "spool-bench.natsbench", "--create", "--purge"); err != nil {
		return err
	}
	if err := run("cross-check: nats bench js consume, pulls of 500, explicit acks (msgs/s)", "consume"); err != nil {
		return err
	}
	if err := run("cross-check: nats bench js pub async, batches of 500, again (msgs/s)", "pub", "async", "spool-bench.natsbench", "--purge"); err != nil {
		return err
	}
	return run("cross-check: nats bench js consume, pulls of 500, acks confirmed (msgs/s)", "consume", "--doubleack")
}

// csvRate reads the messages per second of a nats bench CSV file (the
// MsgsPerSec column of its first data row).
func csvRate(path string) (float64, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, fmt.Errorf("reading the nats bench figures: %w", err)
	}
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	if len(lines) < 2 {
		return 0, fmt.Errorf("nats bench wrote no figures to %s", path)
	}
	head, row := strings.Split(lines[0], ","), strings.Split(lines[1], ",")
	for i, h := range head {
		if h == "MsgsPerSec" && i < len(row) {
			return strconv.ParseFloat(row[i], 64)
		}
	}
	return 0, fmt.Errorf("no MsgsPerSec in %s", path)
}
