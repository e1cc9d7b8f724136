// Command spool-bench measures Spool against raw JetStream on the same
// server, in one process tree, and writes the figures to BENCHMARKS.md.
//
// It starts the JetStream server in a child process (file storage in a
// temporary directory; once with the default sync and once with
// SyncAlways), runs the consumer side in child processes (so their RSS and
// CPU are their own), runs the producer side itself, repeats every
// scenario (-runs, default 3) and reports medians and the Spool/raw ratio.
// The peers scenario runs the same processing, pickup and enqueue work
// against asynq on a redis-server child (skipped, saying so, when
// redis-server is not on PATH).
//
//	go run ./tests/cmd/spool-bench -out BENCHMARKS.md
//	BENCH_QUICK=1 go run ./tests/cmd/spool-bench   # tiny counts, a smoke run
//	go run ./tests/cmd/spool-bench -render BENCHMARKS.json -out BENCHMARKS.md
//
// Beside the report it writes the run's medians as JSON (BENCHMARKS.json),
// from which -render writes the report again.
package main

import (
	"context"
	"errors"
	"flag"
	"log/slog"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"
)

func main() {
	if os.Getenv(childEnv) != "" {
		os.Exit(runChild(os.Args[1:]))
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	cfg := defaultConfig(os.Getenv("BENCH_QUICK") != "")
	fs := flag.CommandLine
	cfg.flags(fs)
	flag.Parse()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	if cfg.render != "" {
		if err := renderFile(cfg.render, cfg.out); err != nil {
			log.Error("rendering the report", "error", err)
			os.Exit(1)
		}
		return
	}
	start := time.Now()
	if err := run(ctx, cfg, log); err != nil {
		log.Error("benchmark failed", "error", err)
		os.Exit(1)
	}
	log.Info("benchmark done", "wall", time.Since(start).Round(time.Second))
}

// run measures every scenario under both sync settings and writes the
// report.
func run(ctx context.Context, cfg config, log *slog.Logger) error {
	started := time.Now()
	res := newResults()
	var err error
	for _, syncAlways := range cfg.syncModes() {
		if err = runMode(ctx, cfg, syncAlways, res, log); err != nil {
			break
		}
	}
	for _, syncAlways := range cfg.syncModes() {
		if err != nil || !cfg.cluster || !cfg.wants("cluster") {
			break
		}
		err = runCluster(ctx, cfg, syncAlways, res, log)
	}
	if err == nil && cfg.cluster && cfg.wants("partitions") {
		err = runPartitions(ctx, cfg, res, log)
	}
	if werr := writeReport(cfg, res, time.Since(started)); werr != nil {
		return errors.Join(err, werr)
	}
	return err
}

// config holds the counts of one harness run.
type config struct {
	quick       bool
	runs        int
	out         string
	render      string // the JSON figures to write the report from, instead of a run
	only        string // "default" or "always": one sync mode only
	profileDir  string // CPU profiles of the consumer children go here
	scenarios   string // comma-separated scenarios to run; empty: all
	latencyN    int    // single enqueues per latency sample set
	batchN      int    // tasks per batch throughput run (default sync)
	batchNAlw   int    // ... with SyncAlways
	batchSize   int    // tasks per EnqueueBatch call
	queued      int    // queued tasks of the processing scenario
	processN    int    // tasks processed per processing run (default sync)
	processNAlw int    // ... with SyncAlways
	pickupN     int    // tasks per pickup run
	pickupRate  int    // tasks/s of the pickup run
	sharesPer   int    // tasks per priority in the shares scenario
	sharesWin   int    // first tasks counted
	sharesSlots int
	backlogLo   int // small backlog
	backlogHi   int // large backlog (default sync only: filling it with SyncAlways takes too long)
	backlogN    int // tasks processed per drain of a backlog run
	backlogReps int // drains per backlog run
	backlogConc int
	concs       []int
	// bullmqDir is the BullMQ program's folder (bullmq/ here).
	bullmqDir string
	limitsN   int // tasks per flow-control run (a quarter with SyncAlways)
	// wfChains is how many chains of 10 the workflow scenario times;
	// wfGroup the members of its group.
	wfChains, wfGroup int
	// cluster runs the cluster scenario (a local 3-node cluster): on by
	// default, off in a quick run.
	cluster bool
	leaderN int // tasks drained per leader-change run
	// leaderKill adds the SIGKILL of the leader's node to the step-down in
	// the leader-change scenario (on; the quick test leaves it out: each
	// takes an election timeout and a node restart).
	leaderKill bool
	// fairBig and fairSmall are the fairness scenario's big key backlog
	// and small keys' backlogs; fairPer the shares' backlog per key (0:
	// fairBig/100, at least 40).
	fairBig, fairSmall, fairPer int
}

func defaultConfig(quick bool) config {
	c := config{
		runs: 3, out: "BENCHMARKS.md", bullmqDir: bullmqDirDefault,
		latencyN: 1000, batchN: 50_000, batchSize: 1000,
		batchNAlw: 20_000,
		queued:    150_000, processN: 100_000, processNAlw: 20_000,
		pickupN: 600, pickupRate: 200,
		sharesPer: 2000, sharesWin: 4000, sharesSlots: 8,
		backlogLo: 10_000, backlogHi: 1_000_000, backlogN: 8000, backlogReps: 6, backlogConc: 100,
		concs: []int{10, 50, 100}, limitsN: 2_000,
		wfChains: 20, wfGroup: 10_000,
		cluster: true, leaderN: 20_000, leaderKill: true,
		fairBig: 100_000, fairSmall: 100,
	}
	if quick {
		c = config{
			quick: true, runs: 1, out: "",
			latencyN: 20, batchN: 500, batchNAlw: 500, batchSize: 100,
			queued: 500, processN: 200, processNAlw: 200,
			pickupN: 20, pickupRate: 200,
			sharesPer: 100, sharesWin: 200, sharesSlots: 8,
			backlogLo: 300, backlogHi: 1000, backlogN: 100, backlogReps: 1, backlogConc: 10,
			concs: []int{10}, limitsN: 200,
			bullmqDir: bullmqDirDefault,
			wfChains:  3, wfGroup: 300,
			leaderN: 3000, leaderKill: true,
			fairBig: 300, fairSmall: 3,
		}
	}
	return c
}

func (c *config) flags(fs *flag.FlagSet) {
	fs.IntVar(&c.runs, "runs", c.runs, "repetitions of every scenario (medians are reported)")
	fs.StringVar(&c.out, "out", c.out, "report file (empty: stdout only); its figures go beside it as JSON (.md replaced by .json)")
	fs.StringVar(&c.render, "render", c.render, "write the report from these JSON figures (a report's sidecar) instead of running the benchmarks")
	fs.StringVar(&c.only, "sync", c.only, "run one sync mode only: default or always")
	fs.StringVar(&c.bullmqDir, "bullmq-dir", c.bullmqDir, "the BullMQ program of the peers scenario, with its npm packages installed")
	fs.StringVar(&c.scenarios, "scenarios", c.scenarios, "run only these scenarios (comma-separated: enqueue,processing,pickup,shares,limits,workflows,natsbench,fairness,backlog,peers,types,isolation,cluster,partitions; the peers table and its targets take Spool's figures from processing and pickup, so run them beside peers)")
	fs.StringVar(&c.profileDir, "profile", c.profileDir, "write CPU profiles of the processing consumers, of the enqueue variants (producer and server) and of the server to this directory, with the server's messages, bytes and system calls over each profiled window (.traffic)")
	fs.IntVar(&c.queued, "queued", c.queued, "queued tasks of the processing scenario")
	fs.BoolVar(&c.cluster, "cluster", c.cluster, "run the cluster and partitions scenarios on a local 3-node cluster (default on; off with BENCH_QUICK)")
	fs.IntVar(&c.fairBig, "fair-big", c.fairBig, "the fairness scenario's big key backlog")
	fs.IntVar(&c.fairSmall, "fair-small", c.fairSmall, "the fairness scenario's backlog of each of its 99 small keys")
	fs.IntVar(&c.fairPer, "fair-per", c.fairPer, "the fairness shares' backlog per key (0: fair-big/100, at least 40)")
	fs.IntVar(&c.processN, "processed", c.processN, "tasks processed per processing run with default sync (at most -queued)")
}

func (c config) wants(scenario string) bool {
	return c.scenarios == "" || slices.Contains(strings.Split(c.scenarios, ","), scenario)
}

func (c config) syncModes() []bool {
	switch c.only {
	case "default":
		return []bool{false}
	case "always":
		return []bool{true}
	}
	return []bool{false, true}
}
