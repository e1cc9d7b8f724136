package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/spoolq/spool/producer"
	spool "github.com/spoolq/spool/shared"
	"github.com/spoolq/spool/streams"
)

// bench is one sync mode's server and the harness's connection to it.
type bench struct {
	cfg   config
	mode  string
	srv   *serverProc
	nc    *nats.Conn
	js    jetstream.JetStream
	names spool.Names
	topo  streams.Topology
	res   *results
	log   *slog.Logger
	// profiles numbers the CPU profiles written.
	profiles int
	// backlogLoRate is the backlog throughput at backlogLo queued, by
	// variant and run, for the ratio at backlogHi.
	backlogLoRate map[string]float64
	// wfRuns numbers the workflow scenario's runs (workflow ids are unique).
	wfRuns int
	// fairRuns numbers the fairness scenario's runs (a type per run).
	fairRuns int
}

func runMode(ctx context.Context, cfg config, syncAlways bool, res *results, log *slog.Logger) error {
	mode := "default sync"
	if syncAlways {
		mode = "SyncAlways"
	}
	dir, err := os.MkdirTemp("", "spool-bench-")
	if err != nil {
		return fmt.Errorf("creating the store directory: %w", err)
	}
	defer os.RemoveAll(dir)
	srv, err := startServer(ctx, dir, syncAlways)
	if err != nil {
		return err
	}
	defer func() {
		if err := srv.stop(); err != nil {
			log.Warn("stopping the server child", "error", err)
		}
	}()
	nc, err := nats.Connect(srv.url, nats.Name("spool-bench"))
	if err != nil {
		return fmt.Errorf("connecting: %w", err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(producer.DefaultPublishWindow))
	if err != nil {
		return fmt.Errorf("opening JetStream: %w", err)
	}
	names := spool.DefaultNames()
	topo, err := streams.New(names, benchSettings(streams.Settings{}))
	if err != nil {
		return err
	}
	b := &bench{cfg: cfg, mode: mode, srv: srv, nc: nc, js: js, names: names, topo: topo, res: res, log: log.With("sync", mode), backlogLoRate: map[string]float64{}}
	res.modes = append(res.modes, mode)
	// Provision before the first scenario: a run of one scenario only
	// (-scenarios processing) finds the stream and its consumers.
	if err := streams.Provision(ctx, js, topo, slog.New(slog.DiscardHandler)); err != nil {
		return fmt.Errorf("provisioning: %w", err)
	}
	steps := []struct {
		name string
		fn   func(context.Context) error
	}{
		{"enqueue", b.enqueue},
		{"processing", b.processing},
		{"pickup", b.pickup},
		{"shares", b.shares},
		{"workflows", b.workflows},
		{"limits", b.limits},
		{"natsbench", b.natsBench},
		{"fairness", b.fairness},
		{"peers", b.peers},
		{"types", b.typesPickup},
		{"isolation", b.isolation},
	}
	for run := 1; run <= cfg.runs; run++ {
		for _, s := range steps {
			if !cfg.wants(s.name) {
				continue
			}
			b.log.Info("scenario", "name", s.name, "run", run)
			runtime.GC()
			if err := s.fn(ctx); err != nil {
				return fmt.Errorf("%s, %s, run %d: %w", mode, s.name, run, err)
			}
		}
	}
	var backlogs []int
	if cfg.wants("backlog") {
		backlogs = []int{cfg.backlogLo, cfg.backlogHi}
	}
	if syncAlways {
		// Every publish is fsynced: filling a million tasks would take
		// most of the run's time budget.
		backlogs = backlogs[:min(1, len(backlogs))]
	}
	for _, backlog := range backlogs {
		if err := b.purge(ctx); err != nil {
			return err
		}
		for run := 1; run <= cfg.runs; run++ {
			b.log.Info("scenario", "name", "backlog", "queued", backlog, "run", run)
			if err := b.backlog(ctx, backlog, run); err != nil {
				return fmt.Errorf("%s, backlog %d, run %d: %w", mode, backlog, run, err)
			}
		}
	}
	return b.purge(ctx)
}

func (b *bench) add(row, variant string, v float64) { b.res.add(b.mode, row, variant, v) }

// drain runs one consume child in drain mode (mode raw or spool; extra
// flags for the child) and records its throughput under prefix.
func (b *bench) drain(ctx context.Context, prefix, variant, mode string, n, conc int, extra ...string) (consumeResult, error) {
	args := append([]string{"-mode", mode, "-task", "drain", "-n", strconv.Itoa(n), "-conc", strconv.Itoa(conc)}, extra...)
	if b.cfg.profileDir != "" {
		b.profiles++
		name := fmt.Sprintf("%s-%s-c%d-%d.pprof", strings.ReplaceAll(b.mode, " ", "-"), mode, conc, b.profiles)
		args = append(args, "-cpuprofile", filepath.Join(b.cfg.profileDir, name),
			"-memprofile", filepath.Join(b.cfg.profileDir, "mem-"+name))
		b.srv.profile = filepath.Join(b.cfg.profileDir, "server-"+name)
	}
	r, err := runConsume(ctx, b.srv, nil, args...)
	if err != nil {
		return r, err
	}
	b.add(prefix+" (tasks/s)", variant, float64(r.Tasks)/r.Seconds)
	return r, nil
}

// processing: 100,000 queued tasks, a no-op handler, concurrency 10 and
// 100; raw is Consume+Ack with nats.go's defaults, raw bounded the same
// with pulls of the concurrency (as many in flight as the worker's slots),
// raw + results stores a small result before each ack, and raw + Spool's
// writes (default sync) does what Spool's contract asks of each task
// (spoolWrites). Spool writes the completed result before the
// ack (and, with its default ProcessingDelay, the processing state only
// for attempts still running after 1s, so a fast task gets one write);
// a second variant writes the processing state as every attempt starts, a
// third runs the worker WithEvents(false), a fourth discards every result
// (WithDiscardResults: the marker of its completion instead of the
// document).
func (b *bench) processing(ctx context.Context) error {
	n := b.cfg.processN
	if b.mode == "SyncAlways" {
		n = b.cfg.processNAlw
	}
	eager := ", processing state written as every attempt starts"
	quiet := ", worker events off"
	discarded := ", results discarded"
	for _, conc := range b.cfg.concs {
		row := fmt.Sprintf("processing: %d queued, concurrency %d", b.cfg.queued, conc)
		cpuRow := fmt.Sprintf("CPU per task: consumer, concurrency %d", conc)
		srvRow := fmt.Sprintf("CPU per task: server, processing at concurrency %d", conc)
		writesRow := fmt.Sprintf("network writes per task: consumer, concurrency %d", conc)
		totalRow := fmt.Sprintf("CPU per task: consumer + server, concurrency %d", conc)
		type variant struct {
			name, mode, rowSuffix string
			extra                 []string
		}
		variants := []variant{
			{"raw", "raw", "", nil},
			{"raw-bounded", "raw-bounded", "", nil},
			{"raw-results", "raw-results", "", nil},
			{"spool", "spool", "", nil},
			{"spool", "spool", eager, []string{"-pdelay", "0s"}},
			{"spool", "spool", quiet, []string{"-events=false"}},
			{"spool", "spool", discarded, []string{"-discard"}},
		}
		if b.mode == "SyncAlways" {
			// The durable mode's baseline: acks the server confirms
			// (each removal fsynced), as many in flight as slots.
			variants = append(variants, variant{"raw-acksync", "raw-acksync", "", nil})
		} else {
			// The floor of Spool's own writes with events on: its
			// document, written conditionally, and its two events.
			variants = slices.Insert(variants, 3, variant{"raw-duty", "raw-duty", "", nil})
		}
		for _, v := range variants {
			if v.rowSuffix != "" && b.cfg.quick {
				continue // the same code path as spool: spare the smoke run a child
			}
			if err := b.topUp(ctx, b.cfg.queued); err != nil {
				return err
			}
			runtime.GC()
			r, err := b.drain(ctx, row+v.rowSuffix, v.name, v.mode, n, conc, v.extra...)
			if err != nil {
				return err
			}
			tasks := float64(r.Tasks)
			cpu, srv, writes := r.CPUus/tasks, r.ServerCPUus/tasks, float64(r.Writes)/tasks
			b.add(cpuRow+v.rowSuffix+" (µs)", v.name, cpu)
			b.add(srvRow+v.rowSuffix+" (µs)", v.name, srv)
			b.add(totalRow+v.rowSuffix+" (µs)", v.name, cpu+srv)
			b.add(writesRow+v.rowSuffix, v.name, writes)
			if v.name != "spool" && v.name != "raw-acksync" && !b.cfg.quick { // the same baselines for the other Spool rows
				for _, suffix := range []string{eager, quiet, discarded} {
					b.add(row+suffix+" (tasks/s)", v.name, tasks/r.Seconds)
					b.add(cpuRow+suffix+" (µs)", v.name, cpu)
					b.add(srvRow+suffix+" (µs)", v.name, srv)
					b.add(totalRow+suffix+" (µs)", v.name, cpu+srv)
					b.add(writesRow+suffix, v.name, writes)
				}
			}
		}
	}
	return b.purge(ctx)
}

// pickup: tasks published one by one at pickupRate to an idle consumer;
// enqueue (stream timestamp) → handler start.
func (b *bench) pickup(ctx context.Context) error {
	subject, err := b.names.TaskSubject(spool.Normal, "bench")
	if err != nil {
		return err
	}
	publish := func() error {
		// Let the consumer's first pulls reach the server.
		time.Sleep(200 * time.Millisecond)
		tick := time.NewTicker(time.Second / time.Duration(b.cfg.pickupRate))
		defer tick.Stop()
		for range b.cfg.pickupN {
			<-tick.C
			if _, err := b.js.PublishAsync(subject, nil); err != nil {
				return fmt.Errorf("publishing: %w", err)
			}
		}
		return nil
	}
	for _, variant := range []string{"raw", "spool"} {
		if err := b.purge(ctx); err != nil {
			return err
		}
		mode := map[bool]string{true: "raw", false: "spool"}[variant == "raw"]
		r, err := runConsume(ctx, b.srv, publish, "-mode", mode, "-task", "pickup", "-n", strconv.Itoa(b.cfg.pickupN), "-conc", "256")
		if err != nil {
			return err
		}
		rate := strconv.Itoa(b.cfg.pickupRate)
		b.add("pickup at "+rate+" tasks/s: p50 (µs)", variant, r.P50us)
		b.add("pickup at "+rate+" tasks/s: p99 (µs)", variant, r.P99us)
		b.add("pickup at "+rate+" tasks/s: max (µs)", variant, r.MaxUs)
		// What a trickle costs: every task pays its own flushes and
		// wake-ups, and the idle worker's upkeep counts against few tasks.
		// The server's share includes storing the producer's publishes.
		b.add("pickup at "+rate+" tasks/s: CPU per task, consumer + server (µs)", variant, (r.CPUus+r.ServerCPUus)/float64(max(1, r.Tasks)))
	}
	return nil
}

// shares: all five priorities saturated; the share of the first tasks
// started per priority against the configured weights, and the longest
// time the idle priority went without a start.
func (b *bench) shares(ctx context.Context) error {
	for _, variant := range []string{"raw", "spool"} {
		if err := b.purge(ctx); err != nil {
			return err
		}
		for _, p := range spool.Priorities {
			if err := b.fill(ctx, p, b.cfg.sharesPer); err != nil {
				return err
			}
		}
		mode := map[bool]string{true: "raw", false: "spool"}[variant == "raw"]
		r, err := runConsume(ctx, b.srv, nil, "-mode", mode, "-task", "shares", "-n", strconv.Itoa(b.cfg.sharesWin), "-conc", strconv.Itoa(b.cfg.sharesSlots))
		if err != nil {
			return err
		}
		var maxErr float64
		for _, p := range spool.Priorities {
			want := weightShare(p)
			b.add(fmt.Sprintf("shares: %s (weight %.1f%%, %%)", p, want), variant, r.Shares[p])
			maxErr = max(maxErr, r.Shares[p]-want, want-r.Shares[p])
		}
		b.add("shares: largest deviation from the weights (pp)", variant, maxErr)
		b.add("shares: longest wait of idle under saturation (ms)", variant, r.IdleMaxWait)
	}
	return b.purge(ctx)
}

// backlog: throughput and consumer RSS with a small and a large backlog;
// the large one also reports its throughput over the small one's, per
// variant and run (raw shows what the server itself loses).
func (b *bench) backlog(ctx context.Context, queued, run int) error {
	row := fmt.Sprintf("backlog: %d queued, concurrency %d (tasks/s)", queued, b.cfg.backlogConc)
	for _, variant := range []string{"raw", "spool"} {
		var tasks int
		var seconds float64
		var hwm int64
		// backlogReps drains of backlogN tasks, each after a top-up to
		// queued: enough tasks for a steady figure, with the backlog
		// never more than backlogN below queued.
		for range b.cfg.backlogReps {
			if err := b.topUp(ctx, queued); err != nil {
				return err
			}
			runtime.GC()
			r, err := runConsume(ctx, b.srv, nil, "-mode", variant, "-task", "drain",
				"-n", strconv.Itoa(b.cfg.backlogN), "-conc", strconv.Itoa(b.cfg.backlogConc))
			if err != nil {
				return err
			}
			tasks += r.Tasks
			seconds += r.Seconds
			hwm = max(hwm, r.HWMKiB)
		}
		rate := float64(tasks) / seconds
		b.add(row, variant, rate)
		b.add(fmt.Sprintf("backlog: %d queued, consumer RSS (MiB)", queued), variant, float64(hwm)/1024)
		key := fmt.Sprintf("%s/%d", variant, run)
		if queued == b.cfg.backlogLo {
			b.backlogLoRate[key] = rate
		} else if lo := b.backlogLoRate[key]; lo > 0 {
			b.add(fmt.Sprintf("backlog: throughput at %d queued / at %d", queued, b.cfg.backlogLo), variant, rate/lo)
		}
	}
	return nil
}
