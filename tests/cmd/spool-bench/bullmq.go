package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
)

// The peers scenario also runs BullMQ (Node.js) on the same redis-server,
// after asynq: the Node program in bullmq/ is its producer and worker, and
// speaks the consume child's protocol, so its figures land in the same rows
// with the variant "bullmq".

const (
	// variantBullMQ is the results variant of the BullMQ figures.
	variantBullMQ = "bullmq"
	// bullmqDirDefault is where the Node program is, from the repository
	// root (where make bench runs the harness).
	bullmqDirDefault = "tests/cmd/spool-bench/bullmq"
	// bullmqInstallHint is what the report prints when Node.js or the
	// program's packages are missing.
	bullmqInstallHint = "Node.js or the BullMQ packages are missing (`make examples` installs the packages; Node.js: `apt-get install nodejs npm`); the BullMQ rows were skipped"
)

// bullmqInfo is what the report says about the BullMQ run.
type bullmqInfo struct {
	skipped string // why the BullMQ rows did not run; empty if they did
	node    string // node --version
	bullmq  string // the bullmq package version
}

// bullmqSetup finds node and the program's installed packages; it returns
// the node path, or "" and records why the rows are skipped.
func (b *bench) bullmqSetup(ctx context.Context) string {
	node, err := exec.LookPath("node")
	dir := b.cfg.bullmqDir
	if err == nil {
		_, err = os.Stat(filepath.Join(dir, "node_modules", "bullmq", "package.json"))
	}
	if err != nil {
		b.res.bullmq.skipped = bullmqInstallHint
		b.log.Warn("BullMQ rows skipped", "reason", bullmqInstallHint, "error", err)
		return ""
	}
	if b.res.bullmq.node == "" {
		out, err := exec.CommandContext(ctx, node, "--version").Output()
		if err == nil {
			b.res.bullmq.node = strings.TrimSpace(string(out))
		}
		b.res.bullmq.bullmq = packageVersion(filepath.Join(dir, "node_modules", "bullmq", "package.json"))
	}
	return node
}

// packageVersion reads the version of an installed npm package.
func packageVersion(path string) string {
	raw, err := os.ReadFile(path)
	if err != nil {
		return "unknown"
	}
	var pkg struct {
		Version string `json:"version"`
	}
	if json.Unmarshal(raw, &pkg) != nil || pkg.Version == "" {
		return "unknown"
	}
	return pkg.Version
}

// runBullMQ runs the Node program in one mode against the peer's Redis:
// drain fills the queue with fill jobs first, as many as Spool's processing
// rows have queued, and times n of them.
func (p *peer) runBullMQ(ctx context.Context, node, mode string, n, fill, conc int) (consumeResult, error) {
	cmd := exec.CommandContext(ctx, node, "bench.mjs", mode, "--redis", p.redis.url,
		"--n", strconv.Itoa(n), "--fill", strconv.Itoa(fill), "--conc", strconv.Itoa(conc),
		"--rate", strconv.Itoa(p.b.cfg.pickupRate))
	cmd.Dir = p.b.cfg.bullmqDir
	cmd.Stderr = os.Stderr
	return runReporting(cmd, p.redis.serverProc, nil, "bullmq "+mode)
}

// bullmq: the processing and pickup scenarios with BullMQ's Worker, a
// no-op processor and BullMQ's defaults (completed jobs kept).
func (p *peer) bullmq(ctx context.Context) error {
	node := p.b.bullmqSetup(ctx)
	if node == "" {
		return nil
	}
	cfg := p.b.cfg
	n := cfg.processN
	if p.b.mode == "SyncAlways" {
		n = cfg.processNAlw
	}
	add := func(row string, v float64) { p.b.add(row, variantBullMQ, v) }
	for _, conc := range cfg.concs {
		if err := p.empty(); err != nil {
			return err
		}
		runtime.GC()
		r, err := p.runBullMQ(ctx, node, "drain", n, max(n, cfg.queued), conc)
		if err != nil {
			return err
		}
		tasks := float64(r.Tasks)
		cpu, srv := r.CPUus/tasks, r.ServerCPUus/tasks
		add(fmt.Sprintf("processing: %d queued, concurrency %d (tasks/s)", cfg.queued, conc), tasks/r.Seconds)
		add(fmt.Sprintf("CPU per task: consumer, concurrency %d (µs)", conc), cpu)
		add(fmt.Sprintf("CPU per task: server, processing at concurrency %d (µs)", conc), srv)
		add(fmt.Sprintf("CPU per task: consumer + server, concurrency %d (µs)", conc), cpu+srv)
	}
	if err := p.empty(); err != nil {
		return err
	}
	r, err := p.runBullMQ(ctx, node, "pickup", cfg.pickupN, 0, 256)
	if err != nil {
		return err
	}
	row := "pickup at " + strconv.Itoa(cfg.pickupRate) + " tasks/s"
	add(row+": p50 (µs)", r.P50us)
	add(row+": p99 (µs)", r.P99us)
	add(row+": max (µs)", r.MaxUs)
	return p.empty()
}
