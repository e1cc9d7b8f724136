package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/pprof"
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
	topo, err := streams.New(names, streams.Settings{})
	if err != nil {
		return err
	}
	b := &bench{cfg: cfg, mode: mode, srv: srv, nc: nc, js: js, names: names, topo: topo, res: res, log: log.With("sync", mode), backlogLoRate: map[string]float64{}}
	res.modes = append(res.modes, mode)
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

// recreate deletes and provisions the task stream again: an empty stream
// with an empty duplicate-tracking table (a purge keeps the table).
func (b *bench) recreate(ctx context.Context) error {
	if err := b.js.DeleteStream(ctx, b.names.TaskStream()); err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
		return fmt.Errorf("deleting the task stream: %w", err)
	}
	return streams.Provision(ctx, b.js, b.topo, slog.New(slog.DiscardHandler))
}

// purge empties the task stream and the results bucket.
func (b *bench) purge(ctx context.Context) error {
	for _, name := range []string{b.names.TaskStream(), "KV_" + b.names.ResultsBucket()} {
		s, err := b.js.Stream(ctx, name)
		if err != nil {
			return fmt.Errorf("binding %s: %w", name, err)
		}
		if err := s.Purge(ctx); err != nil {
			return fmt.Errorf("purging %s: %w", name, err)
		}
	}
	return nil
}

// fill publishes n normal tasks of type bench (no headers: the fastest
// raw publish) and waits for every ack.
func (b *bench) fill(ctx context.Context, p spool.Priority, n int) error {
	subject, err := b.names.TaskSubject(p, "bench")
	if err != nil {
		return err
	}
	payload := []byte(`{"n":1}`)
	for range n {
		if _, err := b.js.PublishAsync(subject, payload, jetstream.WithStallWait(time.Minute)); err != nil {
			return fmt.Errorf("filling: %w", err)
		}
	}
	return b.filled(ctx)
}

// filled waits for the acks of every asynchronous publish of a fill.
func (b *bench) filled(ctx context.Context) error {
	select {
	case <-b.js.PublishAsyncComplete():
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(10 * time.Minute):
		return errors.New("filling: acks did not arrive")
	}
	return nil
}

// topUp fills the normal priority up to n tasks waiting for delivery. It
// reads the consumer's NumPending, not the stream's message count: acks
// are applied asynchronously (slowly under SyncAlways), so the stream may
// still count tasks that were processed.
func (b *bench) topUp(ctx context.Context, n int) error {
	c, err := b.js.Consumer(ctx, b.names.TaskStream(), b.names.Consumer(spool.Normal))
	if err != nil {
		return fmt.Errorf("binding the normal consumer: %w", err)
	}
	info, err := c.Info(ctx)
	if err != nil {
		return fmt.Errorf("reading the normal consumer: %w", err)
	}
	if have := int(info.NumPending); have < n {
		return b.fill(ctx, spool.Normal, n-have)
	}
	return nil
}

// enqueue: single-task latency (p50/p99) and batch throughput, raw and
// spool, on a fresh stream each.
func (b *bench) enqueue(ctx context.Context) error {
	payload := make([]byte, 128)
	subject, err := b.names.TaskSubject(spool.Normal, "bench")
	if err != nil {
		return err
	}
	client, err := producer.New(b.nc, producer.WithNames(b.names))
	if err != nil {
		return err
	}
	defer client.Close()

	latency := func(variant string, one func() error) error {
		if err := b.recreate(ctx); err != nil {
			return err
		}
		samples := make([]time.Duration, 0, b.cfg.latencyN)
		for range b.cfg.latencyN {
			t0 := time.Now()
			if err := one(); err != nil {
				return err
			}
			samples = append(samples, time.Since(t0))
		}
		slices.Sort(samples)
		b.add("enqueue: single task p50 (µs)", variant, us(samples[len(samples)/2]))
		b.add("enqueue: single task p99 (µs)", variant, us(samples[len(samples)*99/100]))
		return nil
	}
	if err := latency("raw", func() error {
		_, err := b.js.Publish(ctx, subject, payload)
		return err
	}); err != nil {
		return fmt.Errorf("raw publish: %w", err)
	}
	task := producer.NewTask("bench", payload)
	if err := latency("spool", func() error {
		_, err := client.Enqueue(ctx, task)
		return err
	}); err != nil {
		return fmt.Errorf("spool enqueue: %w", err)
	}

	quiet, err := producer.New(b.nc, producer.WithNames(b.names), producer.WithEnqueuedEvents(false))
	if err != nil {
		return err
	}
	defer quiet.Close()

	// measured keeps each figure of this run, by row and variant.
	measured := map[[2]string]float64{}
	add := func(row, variant string, v float64) {
		measured[[2]string{row, variant}] = v
		b.add(row, variant, v)
	}
	// measure times one way of enqueueing total tasks (run) on a fresh
	// stream, under row.
	measure := func(variant, row string, run func(total int) error) error {
		if err := b.recreate(ctx); err != nil {
			return err
		}
		runtime.GC()
		stopProfile, err := b.profileEnqueue(variant, row)
		if err != nil {
			return err
		}
		cpu0, srv0, t0 := selfCPU(), b.srv.cpu(), time.Now()
		total := b.cfg.batchN
		if b.mode == "SyncAlways" {
			total = b.cfg.batchNAlw
		}
		err = run(total)
		wall := time.Since(t0)
		stopProfile()
		if err != nil {
			return err
		}
		n := float64(total)
		add("enqueue: "+row+" (tasks/s)", variant, n/wall.Seconds())
		add("CPU per task: producer, "+row+" (µs)", variant, us(selfCPU()-cpu0)/n)
		add("CPU per task: server, "+row+" (µs)", variant, us(b.srv.cpu()-srv0)/n)
		return nil
	}
	rawMsg := func(headers bool) *nats.Msg {
		m := &nats.Msg{Subject: subject, Data: payload}
		if headers {
			m.Header = nats.Header{spool.HeaderMsgID: {spool.NewID()}}
		}
		return m
	}
	// Streaming: every task published without waiting, the window (4096)
	// bounding what is in flight, then every outcome checked: raw is
	// PublishMsgAsync + PublishAsyncComplete as a user writes it, Spool
	// EnqueueAsync + EnqueueAsyncComplete.
	rawStream := func(headers bool) func(int) error {
		return func(total int) error {
			futures := make([]jetstream.PubAckFuture, 0, total)
			for range total {
				f, err := b.js.PublishMsgAsync(rawMsg(headers), jetstream.WithStallWait(time.Minute))
				if err != nil {
					return err
				}
				futures = append(futures, f)
			}
			if err := b.filled(ctx); err != nil {
				return err
			}
			return awaitFutures(futures)
		}
	}
	// Batches: batchSize tasks at a time, each batch waited for before the
	// next (raw bounded: PublishMsgAsync and every future; Spool
	// EnqueueBatch).
	futures := make([]jetstream.PubAckFuture, b.cfg.batchSize)
	rawBatches := func(total int) error {
		for done := 0; done < total; done += len(futures) {
			for i := range futures {
				f, err := b.js.PublishMsgAsync(rawMsg(true))
				if err != nil {
					return err
				}
				futures[i] = f
			}
			if err := awaitFutures(futures); err != nil {
				return err
			}
		}
		return nil
	}
	// spoolStream streams with EnqueueAsync + EnqueueAsyncComplete, then
	// checks every outcome.
	spoolStream := func(client *producer.Client) func(int) error {
		return func(total int) error {
			pending := make([]*producer.Pending, 0, total)
			for range total {
				p, err := client.EnqueueAsync(ctx, producer.Task{Type: "bench", Payload: payload})
				if err != nil {
					return err
				}
				pending = append(pending, p)
			}
			select {
			case <-client.EnqueueAsyncComplete():
			case <-ctx.Done():
				return ctx.Err()
			}
			for _, p := range pending {
				if _, err := p.Wait(ctx); err != nil {
					return err
				}
			}
			return nil
		}
	}
	const streamRow, batchRow = "streaming", "batches waited one by one"
	// quietRow is Spool streaming from a client without enqueued events
	// (WithEnqueuedEvents(false)); its raw cells repeat streamRow's.
	const quietRow = "streaming, no enqueued events"
	for _, v := range []struct {
		variant, row string
		run          func(int) error
	}{
		{"raw", streamRow, rawStream(false)},
		{"raw+headers", streamRow, rawStream(true)},
		{"spool", streamRow, spoolStream(client)},
		{"spool", quietRow, spoolStream(quiet)},
		{"raw-bounded", batchRow, rawBatches},
		{"spool", batchRow, func(total int) error {
			tasks := make([]producer.Task, b.cfg.batchSize)
			for i := range tasks {
				tasks[i] = producer.Task{Type: "bench", Payload: payload}
			}
			for done := 0; done < total; done += len(tasks) {
				if _, err := client.EnqueueBatch(ctx, tasks); err != nil {
					return err
				}
			}
			return nil
		}},
	} {
		if err := measure(v.variant, v.row, v.run); err != nil {
			return fmt.Errorf("%s enqueue, %s: %w", v.variant, v.row, err)
		}
	}
	for _, variant := range []string{"raw", "raw+headers"} {
		for _, f := range []string{"enqueue: %s (tasks/s)", "CPU per task: producer, %s (µs)", "CPU per task: server, %s (µs)"} {
			b.add(fmt.Sprintf(f, quietRow), variant, measured[[2]string{fmt.Sprintf(f, streamRow), variant}])
		}
	}
	return b.recreate(ctx)
}

// profileEnqueue starts, with -profile, CPU profiles of the harness (the
// producer) and of the server child for one enqueue variant; the returned
// func stops both.
func (b *bench) profileEnqueue(variant, row string) (stop func(), err error) {
	if b.cfg.profileDir == "" {
		return func() {}, nil
	}
	b.profiles++
	name := fmt.Sprintf("%s-enqueue-%s-%s-%d.pprof", strings.ReplaceAll(b.mode, " ", "-"), variant, strings.ReplaceAll(row, " ", "-"), b.profiles)
	fh, err := os.Create(filepath.Join(b.cfg.profileDir, "producer-"+name))
	if err != nil {
		return nil, fmt.Errorf("creating the producer profile: %w", err)
	}
	if err := pprof.StartCPUProfile(fh); err != nil {
		_ = fh.Close()
		return nil, fmt.Errorf("starting the producer profile: %w", err)
	}
	fmt.Fprintf(b.srv.stdin, "profile %s\n", filepath.Join(b.cfg.profileDir, "server-"+name))
	return func() {
		pprof.StopCPUProfile()
		_ = fh.Close()
		fmt.Fprintln(b.srv.stdin, "stop")
	}, nil
}

// awaitFutures waits for every publish acknowledgement; the first error
// ends it.
func awaitFutures(futures []jetstream.PubAckFuture) error {
	for _, f := range futures {
		select {
		case <-f.Ok():
		case err := <-f.Err():
			return err
		}
	}
	return nil
}

func us(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }

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
// with pulls of the concurrency (as many in flight as the worker's slots). Spool writes the completed result before the
// ack (and, with its default ProcessingDelay, the processing state only
// for attempts still running after 1s, so a fast task gets one write);
// a second variant writes the processing state as every attempt starts, a
// third runs the worker WithEvents(false).
func (b *bench) processing(ctx context.Context) error {
	n := b.cfg.processN
	if b.mode == "SyncAlways" {
		n = b.cfg.processNAlw
	}
	eager := ", processing state written as every attempt starts"
	quiet := ", worker events off"
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
		}
		if b.mode == "SyncAlways" {
			// The durable mode's baseline: acks the server confirms
			// (each removal fsynced), as many in flight as slots.
			variants = append(variants, variant{"raw-acksync", "raw-acksync", "", nil})
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
				for _, suffix := range []string{eager, quiet} {
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
