package main

import (
	"context"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestStatCPU(t *testing.T) {
	// pid (comm) state ppid ... utime stime cutime cstime ...: the command
	// may hold spaces and parentheses.
	line := "4242 (redis-server (x) 1) S 1 4242 4242 0 -1 4194560 100 0 0 0 250 50 7 3 20 0 5 0 123 456 789"
	if got, want := statCPU(line), 310*10*time.Millisecond; got != want {
		t.Errorf("statCPU = %v, want %v (utime+stime+cutime+cstime)", got, want)
	}
	for _, bad := range []string{"", "4242 (cut", "4242 (x) S 1 2"} {
		if got := statCPU(bad); got != 0 {
			t.Errorf("statCPU(%q) = %v, want 0", bad, got)
		}
	}
}

func TestRedisVersion(t *testing.T) {
	for in, want := range map[string]string{
		"Redis server v=7.0.15 sha=00000000:0 malloc=jemalloc-5.3.0 bits=64 build=ae4d7c971a948f0\n": "7.0.15",
		"something else\n": "something else",
	} {
		if got := redisVersion(in); got != want {
			t.Errorf("redisVersion(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestRedisArgs(t *testing.T) {
	def := strings.Join(redisArgs(6390, "/d", false), " ")
	always := strings.Join(redisArgs(6390, "/d", true), " ")
	for _, want := range []string{"--bind 127.0.0.1", "--port 6390", "--dir /d", "--save " + redisSave} {
		if !strings.Contains(def, want) || !strings.Contains(always, want) {
			t.Errorf("args lack %q:\n%s\n%s", want, def, always)
		}
	}
	if !strings.Contains(def, "--appendonly no") || strings.Contains(def, "appendfsync") {
		t.Errorf("default persistence args: %s", def)
	}
	if !strings.Contains(always, "--appendonly yes --appendfsync always") {
		t.Errorf("always persistence args: %s", always)
	}
}

func TestStampPayload(t *testing.T) {
	at := time.Unix(1_700_000_000, 123456789)
	got, err := stampTime(stampPayload(at))
	if err != nil || !got.Equal(at) {
		t.Fatalf("stampTime(stampPayload(%v)) = %v, %v", at, got, err)
	}
	if _, err := stampTime([]byte(`{"n":1}`)); err == nil {
		t.Error("stampTime accepted a 7-byte payload")
	}
}

// TestPeerReport renders asynq and BullMQ figures beside Spool's under
// short labels, a peer-only row with no Spool cell, and says why a
// skipped run has none.
func TestPeerReport(t *testing.T) {
	res := newResults()
	res.modes = []string{"default sync"}
	res.peer = peerInfo{redis: "7.0.15", asynq: "v0.26.0"}
	res.bullmq = bullmqInfo{node: "v20.20.2", bullmq: "6.7.0"}
	const both, peerOnly = "processing: 10 queued, concurrency 10 (tasks/s)", "pickup at 200 tasks/s: p99 (µs)"
	res.add("default sync", both, "raw", 300)
	res.add("default sync", both, "spool", 200)
	res.add("default sync", both, variantAsynq, 100)
	res.add("default sync", both, variantAsynq, 120)
	res.add("default sync", both, variantBullMQ, 50)
	res.add("default sync", peerOnly, variantAsynq, 5000)
	res.add("default sync", peerOnly, variantBullMQ, 1500)
	const pickup = "pickup at 200 tasks/s: p50 (µs)"
	res.add("default sync", pickup, "spool", 200)
	res.add("default sync", pickup, variantAsynq, 600_000)
	cfg := defaultConfig(true)
	report := string(renderReport(res.snapshot(cfg, time.Second)))
	_, peer, ok := strings.Cut(report, "## Peers on Redis: asynq and BullMQ")
	if !ok {
		t.Fatalf("no peers table:\n%s", report)
	}
	for _, want := range []string{
		"| R1 | processing c=10 (tasks/s) | 200 | 110 | 50.0 | 1.82 | 4.00 |", // median of 100 and 120; Spool / asynq, Spool / BullMQ
		"| R1 | pickup p99 (µs) |  | 5,000 | 1,500 |  |  |",
		"| R1 | pickup p50 (µs) | 200 | 600,000 |  | 0.00033 |  |",
	} {
		if !strings.Contains(peer, want) {
			t.Errorf("peers table lacks %q:\n%s", want, peer)
		}
	}
	if strings.Contains(report, "## Other figures") {
		t.Errorf("a peer row fell through to the other figures:\n%s", report)
	}
	if !strings.Contains(report, "- **Peers.** asynq v0.26.0 and BullMQ 6.7.0 (Node.js v20.20.2") {
		t.Errorf("no method note for the peers:\n%s", report)
	}
	if !strings.Contains(report, "| processing c=10 ≥ 2× BullMQ | met | 4.00 | 200 / 50.0 tasks/s |") {
		t.Errorf("no verdict against BullMQ:\n%s", report)
	}

	m := peerMethod(peerVersions{AsynqSkipped: redisInstallHint})
	if !strings.Contains(m, "skipped: redis-server is not installed") || !strings.Contains(m, "apt-get install redis-server") {
		t.Errorf("skip note: %q", m)
	}
}

// TestPeersRedis runs the peers scenario with tiny counts against a real
// redis-server; it needs redis-server on PATH.
func TestPeersRedis(t *testing.T) {
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Skip("redis-server is not installed (apt-get install redis-server): the asynq peer rows cannot run")
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	cfg := defaultConfig(true)
	cfg.only, cfg.scenarios = "default", "peers"
	cfg.out = filepath.Join(t.TempDir(), "BENCHMARKS.md")
	// The test runs in this package's folder; make test installs the
	// BullMQ program's packages (make examples).
	cfg.bullmqDir = "bullmq"
	if _, err := os.Stat(filepath.Join(cfg.bullmqDir, "node_modules", "bullmq")); err != nil {
		t.Fatalf("the BullMQ rows need the program's npm packages: run make examples (%v)", err)
	}
	res := newResults()
	if err := runMode(ctx, cfg, false, res, slog.New(slog.NewTextHandler(t.Output(), nil))); err != nil {
		t.Fatal(err)
	}
	if res.peer.skipped != "" || res.peer.redis == "" || res.peer.asynq == "" {
		t.Fatalf("peer info %+v", res.peer)
	}
	if res.bullmq.skipped != "" || res.bullmq.bullmq != "6.7.0" || res.bullmq.node == "" {
		t.Fatalf("BullMQ info %+v", res.bullmq)
	}
	for _, row := range []string{
		"processing: 500 queued, concurrency 10 (tasks/s)",
		"CPU per task: consumer + server, concurrency 10 (µs)",
		"pickup at 200 tasks/s: p99 (µs)",
	} {
		if v, n := res.median("default sync", row, variantBullMQ); n != 1 || v <= 0 {
			t.Errorf("%s: BullMQ figure %v from %d runs", row, v, n)
		}
	}
	for _, row := range []string{
		"enqueue: batch throughput (tasks/s)",
		"processing: 500 queued, concurrency 10 (tasks/s)",
		"pickup at 200 tasks/s: p50 (µs)",
		"pickup at 200 tasks/s, asynq TaskCheckInterval 10ms: p99 (µs)",
	} {
		if !slices.Contains(res.rows["default sync"], row) {
			t.Errorf("no row %q", row)
			continue
		}
		if v, n := res.median("default sync", row, variantAsynq); n != 1 || v <= 0 {
			t.Errorf("%s: asynq figure %v from %d runs", row, v, n)
		}
	}
}
