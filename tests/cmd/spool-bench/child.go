package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/spoolq/spool/consumer"
	spool "github.com/spoolq/spool/shared"
	"github.com/spoolq/spool/tests/devstack"
)

// childEnv marks a process started by the harness as one of its children:
// the first argument then names the role (server, consume).
const childEnv = "SPOOL_BENCH_CHILD"

// runChild runs a child role and returns the process exit code.
func runChild(args []string) int {
	if len(args) == 0 {
		fmt.Fprintln(os.Stderr, "spool-bench child: no role")
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var err error
	switch args[0] {
	case "server":
		err = serveChild(ctx, args[1:])
	case "consume":
		err = consumeChild(ctx, args[1:])
	case "node":
		err = nodeChild(ctx, args[1:])
	default:
		err = fmt.Errorf("unknown role %q", args[0])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "spool-bench child:", err)
		return 1
	}
	return 0
}

// serveChild runs the JetStream server with the topology provisioned,
// prints its URL and serves until stdin closes.
func serveChild(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("server", flag.ContinueOnError)
	dir := fs.String("dir", "", "store directory")
	syncAlways := fs.Bool("sync", false, "SyncAlways")
	if err := fs.Parse(args); err != nil {
		return err
	}
	st, err := devstack.Start(ctx, devstack.Options{StoreDir: *dir, SyncAlways: *syncAlways, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return fmt.Errorf("starting the server: %w", err)
	}
	defer st.Stop()
	fmt.Println(st.URL)
	done := make(chan struct{})
	go func() {
		serverCommands(os.Stdin)
		close(done)
	}()
	select {
	case <-done:
	case <-ctx.Done():
	}
	return nil
}

// serverCommands reads the harness's commands from r until it closes:
// "profile <file>" starts a CPU profile of the server child, "stop" ends
// it (the processing scenario profiles the server over a consumer's
// measured window).
func serverCommands(r io.Reader) {
	sc := bufio.NewScanner(r)
	var prof *os.File
	stop := func() {
		if prof != nil {
			pprof.StopCPUProfile()
			_ = prof.Close()
			prof = nil
		}
	}
	defer stop()
	for sc.Scan() {
		cmd, arg, _ := strings.Cut(sc.Text(), " ")
		switch cmd {
		case "profile":
			stop()
			fh, err := os.Create(arg)
			if err != nil {
				fmt.Fprintln(os.Stderr, "spool-bench server: creating the profile:", err)
				continue
			}
			if err := pprof.StartCPUProfile(fh); err != nil {
				fmt.Fprintln(os.Stderr, "spool-bench server: starting the profile:", err)
				_ = fh.Close()
				continue
			}
			prof = fh
		case "stop":
			stop()
		}
	}
}

// consumeReport is what a consume child prints as its last line.
type consumeReport struct {
	Tasks   int     `json:"tasks"`
	Seconds float64 `json:"seconds"`
	CPUus   float64 `json:"cpu_us"` // user+sys over the measured window
	Writes  int64   `json:"writes"` // write system calls over the measured window
	RSSKiB  int64   `json:"rss_kib"`
	HWMKiB  int64   `json:"hwm_kib"`
	// pickup
	P50us, P99us, MaxUs float64
	// shares
	Shares      [5]float64 `json:"shares"`
	IdleMaxWait float64    `json:"idle_max_wait_ms"`
	// HandBacks counts the tasks a spool worker handed back for flow
	// control (a full limit) during the run.
	HandBacks uint64 `json:"hand_backs"`
}

type consumeFlags struct {
	url, mode, task string
	n, conc         int
	pdelay          time.Duration
	events          bool
	countType       string        // drain: count the completions of this type only
	asynqPoll       time.Duration // asynq: Config.TaskCheckInterval (0: its default, 1s)
}

// consumeChild runs one consumer-side measurement: raw JetStream or a
// spool worker, draining (drain), picking up paced tasks (pickup) or
// serving all priorities (shares). It prints "start" when the measured
// window begins and a JSON consumeReport when it ends.
func consumeChild(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("consume", flag.ContinueOnError)
	var f consumeFlags
	fs.StringVar(&f.url, "url", "", "server URL")
	fs.StringVar(&f.mode, "mode", "spool", "raw, spool or asynq")
	fs.StringVar(&f.task, "task", "drain", "drain, pickup or shares")
	fs.IntVar(&f.n, "n", 1000, "tasks to measure")
	fs.IntVar(&f.conc, "conc", 10, "concurrency")
	fs.DurationVar(&f.pdelay, "pdelay", time.Second, "spool: WithProcessingDelay (the worker's default is 1s)")
	fs.BoolVar(&f.events, "events", true, "spool: WithEvents")
	fs.StringVar(&f.countType, "count-type", "", "spool drain: count the completions of this task type only (default: all)")
	fs.DurationVar(&f.asynqPoll, "asynq-poll", 0, "asynq: TaskCheckInterval (0: asynq's default, 1s)")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the run to this file")
	memProfile := fs.String("memprofile", "", "write an allocation profile of the run to this file")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *cpuProfile != "" {
		fh, err := os.Create(*cpuProfile)
		if err != nil {
			return fmt.Errorf("creating the profile: %w", err)
		}
		defer fh.Close()
		if err := pprof.StartCPUProfile(fh); err != nil {
			return fmt.Errorf("starting the profile: %w", err)
		}
		defer pprof.StopCPUProfile()
	}
	if f.mode == "asynq" { // the peer: -url is a Redis address
		var rep consumeReport
		if err := asynqConsume(ctx, f, &rep); err != nil {
			return err
		}
		return finishConsume(&rep, *memProfile)
	}
	nc, err := nats.Connect(f.url, nats.Name("spool-bench-consume"))
	if err != nil {
		return fmt.Errorf("connecting: %w", err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return fmt.Errorf("opening JetStream: %w", err)
	}
	names := spool.DefaultNames()
	var rep consumeReport
	switch {
	case f.task == "drain" && f.mode == "raw":
		err = rawConsume(ctx, js, names, f, &rep, false)
	case f.task == "drain" && f.mode == "raw-bounded":
		err = rawConsume(ctx, js, names, f, &rep, true)
	case f.task == "drain" && f.mode == "raw-results":
		err = rawResults(ctx, js, names, f, &rep)
	case f.task == "drain" && f.mode == "raw-acksync":
		err = rawAckSync(ctx, js, names, f, &rep)
	case f.task == "drain":
		err = spoolRun(ctx, nc, f, &rep, nil)
	case f.task == "pickup" && f.mode == "raw":
		err = rawPickup(ctx, js, names, f, &rep)
	case f.task == "pickup":
		var mu sync.Mutex
		samples := make([]time.Duration, 0, f.n)
		err = spoolRun(ctx, nc, f, &rep, func(t *consumer.Task) {
			d := time.Since(t.EnqueuedAt)
			mu.Lock()
			samples = append(samples, d)
			mu.Unlock()
		})
		mu.Lock()
		quantiles(samples, &rep)
		mu.Unlock()
	case f.task == "shares" && f.mode == "raw":
		err = rawShares(ctx, js, names, f, &rep)
	case f.task == "shares":
		var mu sync.Mutex
		var order []spool.Priority
		var starts []time.Time
		start := time.Now()
		err = spoolRun(ctx, nc, f, &rep, func(t *consumer.Task) {
			now := time.Now()
			mu.Lock()
			order = append(order, t.Priority)
			starts = append(starts, now)
			mu.Unlock()
		})
		mu.Lock()
		shares(order, starts, start, f.n, &rep)
		mu.Unlock()
	default:
		err = fmt.Errorf("unknown task %q", f.task)
	}
	if err != nil {
		return err
	}
	return finishConsume(&rep, *memProfile)
}

// finishConsume writes the allocation profile (if asked) and prints the
// report as the child's last line.
func finishConsume(rep *consumeReport, memProfile string) error {
	if memProfile != "" {
		fh, err := os.Create(memProfile)
		if err != nil {
			return fmt.Errorf("creating the profile: %w", err)
		}
		defer fh.Close()
		if err := pprof.Lookup("allocs").WriteTo(fh, 0); err != nil {
			return fmt.Errorf("writing the profile: %w", err)
		}
	}
	rep.RSSKiB, rep.HWMKiB = procStatus()
	b, err := json.Marshal(rep)
	if err != nil {
		return fmt.Errorf("encoding report: %w", err)
	}
	fmt.Println(string(b))
	return nil
}

// window measures CPU and wall time of the measured part.
type window struct {
	t0      time.Time
	cpu0    time.Duration
	writes0 int64
}

func startWindow() window {
	fmt.Println("start")
	return window{t0: time.Now(), cpu0: selfCPU(), writes0: selfWrites()}
}

func (w window) end(rep *consumeReport, tasks int) {
	rep.Seconds = time.Since(w.t0).Seconds()
	rep.CPUus = float64((selfCPU() - w.cpu0).Microseconds())
	rep.Writes = selfWrites() - w.writes0
	rep.Tasks = tasks
}

// selfWrites is the number of write system calls this process has made
// (syscw in /proc/self/io): a consumer writes only to its connection, so
// these are its network writes, each of which costs it and the server far
// more than a message does.
func selfWrites() int64 {
	b, err := os.ReadFile("/proc/self/io")
	if err != nil {
		return 0
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, "syscw: "); ok {
			n, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			return n
		}
	}
	return 0
}

func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// procStatus reads VmRSS and VmHWM (KiB) of this process.
func procStatus() (rss, hwm int64) {
	fh, err := os.Open("/proc/self/status")
	if err != nil {
		return 0, 0
	}
	defer fh.Close()
	sc := bufio.NewScanner(fh)
	for sc.Scan() {
		var v int64
		if n, _ := fmt.Sscanf(sc.Text(), "VmRSS: %d kB", &v); n == 1 {
			rss = v
		}
		if n, _ := fmt.Sscanf(sc.Text(), "VmHWM: %d kB", &v); n == 1 {
			hwm = v
		}
	}
	return rss, hwm
}

// stallLimit fails a measurement that makes no progress.
const stallLimit = time.Minute

// rawAckSync is the raw baseline of the durable mode: Consume with pulls
// of conc messages, each acked with DoubleAck (the server confirms the
// ack is applied, which on a WorkQueue stream removes the message and,
// under SyncAlways, fsyncs the removal) by one of conc goroutines: as many
// in flight as the worker's slots, each waiting for its ack to be durable
// as a Spool attempt waits for its result to be.
func rawAckSync(ctx context.Context, js jetstream.JetStream, names spool.Names, f consumeFlags, rep *consumeReport) error {
	cons, err := js.Consumer(ctx, names.TaskStream(), names.Consumer(spool.Normal))
	if err != nil {
		return fmt.Errorf("binding consumer: %w", err)
	}
	msgs := make(chan jetstream.Msg, f.conc)
	var got atomic.Int64
	var ackErr atomic.Value
	done := make(chan struct{})
	var wg sync.WaitGroup
	for range f.conc {
		wg.Go(func() {
			for m := range msgs {
				actx, cancel := context.WithTimeout(ctx, 30*time.Second)
				if err := m.DoubleAck(actx); err != nil {
					ackErr.CompareAndSwap(nil, err)
				}
				cancel()
				if got.Add(1) == int64(f.n) {
					close(done)
				}
			}
		})
	}
	defer wg.Wait()
	defer close(msgs)
	w := startWindow()
	cc, err := cons.Consume(func(m jetstream.Msg) { msgs <- m }, jetstream.PullMaxMessages(f.conc))
	if err != nil {
		return fmt.Errorf("consuming: %w", err)
	}
	defer cc.Stop()
	select {
	case <-done:
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(10 * time.Minute):
		return fmt.Errorf("%d of %d acked in 10 minutes", got.Load(), f.n)
	}
	w.end(rep, f.n)
	cc.Drain()
	<-cc.Closed()
	if err, _ := ackErr.Load().(error); err != nil {
		return fmt.Errorf("acking: %w", err)
	}
	return nil
}

// rawConsume is the raw baseline a user writes first with nats.go:
// Consume with its defaults (pulls of up to 500 messages, the next pull
// once half of them are handled, heartbeats) and Ack in the callback.
// bounded limits the pulls to conc messages (PullMaxMessages), the same
// number in flight as a worker's slots. Every message delivered is acked
// (those past n too, until the drained consumer closes: unacked ones would
// come back to a later run), the window ends at n.
func rawConsume(ctx context.Context, js jetstream.JetStream, names spool.Names, f consumeFlags, rep *consumeReport, bounded bool) error {
	cons, err := js.Consumer(ctx, names.TaskStream(), names.Consumer(spool.Normal))
	if err != nil {
		return fmt.Errorf("binding consumer: %w", err)
	}
	var opts []jetstream.PullConsumeOpt
	if bounded {
		opts = append(opts, jetstream.PullMaxMessages(f.conc))
	}
	var got atomic.Int64
	var ackErr atomic.Value
	done := make(chan struct{})
	w := startWindow()
	cc, err := cons.Consume(func(m jetstream.Msg) {
		if err := m.Ack(); err != nil {
			ackErr.CompareAndSwap(nil, err)
		}
		if got.Add(1) == int64(f.n) {
			close(done)
		}
	}, opts...)
	if err != nil {
		return fmt.Errorf("consuming: %w", err)
	}
	defer cc.Stop() // a no-op once drained
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	last, progress := int64(0), time.Now()
wait:
	for {
		select {
		case <-done:
			break wait
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
		if n := got.Load(); n != last {
			last, progress = n, time.Now()
		} else if time.Since(progress) > stallLimit {
			return fmt.Errorf("no task consumed for %s (%d of %d done)", stallLimit, n, f.n)
		}
	}
	fctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := js.Conn().FlushWithContext(fctx); err != nil {
		return fmt.Errorf("flushing: %w", err)
	}
	w.end(rep, f.n)
	cc.Drain()
	select {
	case <-cc.Closed():
	case <-fctx.Done():
	}
	if err := js.Conn().FlushWithContext(fctx); err != nil {
		return fmt.Errorf("flushing: %w", err)
	}
	if err, _ := ackErr.Load().(error); err != nil {
		return fmt.Errorf("acking: %w", err)
	}
	return nil
}

// rawResults is the raw baseline that writes results, as a user would
// with nats.go: Consume with its defaults; the callback publishes a small
// result document to the message's key of the results bucket with
// PublishAsync (nats.go's default window, waiting for room when it is
// full) and hands the message with its
// future to a goroutine that acks it once the result is stored, so no ack
// precedes its result, as in Spool. The task id is the stream sequence,
// as Spool's is for a task published without one.
func rawResults(ctx context.Context, js jetstream.JetStream, names spool.Names, f consumeFlags, rep *consumeReport) error {
	cons, err := js.Consumer(ctx, names.TaskStream(), names.Consumer(spool.Normal))
	if err != nil {
		return fmt.Errorf("binding consumer: %w", err)
	}
	type stored struct {
		m   jetstream.Msg
		put jetstream.PubAckFuture
	}
	queue := make(chan stored, 4096)
	var got atomic.Uint64
	var ackErr atomic.Value
	var wg sync.WaitGroup
	wg.Go(func() {
		for s := range queue {
			select {
			case <-s.put.Ok():
				if err := s.m.Ack(); err != nil {
					ackErr.CompareAndSwap(nil, err)
				}
			case err := <-s.put.Err():
				ackErr.CompareAndSwap(nil, fmt.Errorf("storing a result: %w", err))
			}
			got.Add(1)
		}
	})
	w := startWindow()
	cc, err := cons.Consume(func(m jetstream.Msg) {
		md, err := m.Metadata()
		if err != nil {
			ackErr.CompareAndSwap(nil, err)
			return
		}
		id := strconv.FormatUint(md.Sequence.Stream, 10)
		doc := fmt.Appendf(nil, `{"id":%q,"state":"completed","finished_at":%q}`, id, time.Now().UTC().Format(time.RFC3339Nano))
		// A full window waits for room (back-pressure) rather than
		// failing after nats.go's default 200ms, which SyncAlways exceeds.
		put, err := js.PublishAsync(names.ResultSubject(id), doc, jetstream.WithStallWait(stallLimit))
		if err != nil {
			ackErr.CompareAndSwap(nil, fmt.Errorf("storing a result: %w", err))
			return
		}
		queue <- stored{m, put}
	})
	if err != nil {
		close(queue)
		wg.Wait()
		return fmt.Errorf("consuming: %w", err)
	}
	err = awaitCount(ctx, f.n, "acked", got.Load)
	if err == nil {
		fctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err = js.Conn().FlushWithContext(fctx)
		cancel()
		w.end(rep, f.n)
	}
	// Every message delivered is acked once its result is stored (those
	// past n too): unacked ones would come back to a later run.
	// Under SyncAlways the messages in hand (a pull of up to 500, and the
	// queue) take seconds to store their results.
	cc.Drain()
	select {
	case <-cc.Closed():
	case <-time.After(stallLimit):
		return errors.Join(err, fmt.Errorf("the drained consumer did not close in %s", stallLimit))
	}
	close(queue)
	wg.Wait()
	if err != nil {
		return err
	}
	// The last acks leave before the process ends.
	fctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := js.Conn().FlushWithContext(fctx); err != nil {
		return fmt.Errorf("flushing: %w", err)
	}
	if err, _ := ackErr.Load().(error); err != nil {
		return fmt.Errorf("acking: %w", err)
	}
	return nil
}

// rawPickup is a waiting Fetch(1) loop: enqueue (stream time) → delivery.
func rawPickup(ctx context.Context, js jetstream.JetStream, names spool.Names, f consumeFlags, rep *consumeReport) error {
	cons, err := js.Consumer(ctx, names.TaskStream(), names.Consumer(spool.Normal))
	if err != nil {
		return fmt.Errorf("binding consumer: %w", err)
	}
	samples := make([]time.Duration, 0, f.n)
	w := startWindow()
	for len(samples) < f.n {
		b, err := cons.Fetch(1, jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			return fmt.Errorf("fetching: %w", err)
		}
		for m := range b.Messages() {
			md, err := m.Metadata()
			if err != nil {
				return fmt.Errorf("metadata: %w", err)
			}
			samples = append(samples, time.Since(md.Timestamp))
			if err := m.Ack(); err != nil {
				return fmt.Errorf("acking: %w", err)
			}
		}
	}
	w.end(rep, len(samples))
	quantiles(samples, rep)
	return nil
}

// rawShares round-robins FetchNoWait(conc) over the five consumers.
func rawShares(ctx context.Context, js jetstream.JetStream, names spool.Names, f consumeFlags, rep *consumeReport) error {
	var cons [5]jetstream.Consumer
	for _, p := range spool.Priorities {
		c, err := js.Consumer(ctx, names.TaskStream(), names.Consumer(p))
		if err != nil {
			return fmt.Errorf("binding consumer: %w", err)
		}
		cons[p] = c
	}
	var order []spool.Priority
	var starts []time.Time
	start := time.Now()
	w := startWindow()
	for i := 0; len(order) < f.n; i++ {
		p := spool.Priorities[i%5]
		b, err := cons[p].FetchNoWait(f.conc)
		if err != nil {
			return fmt.Errorf("fetching: %w", err)
		}
		for m := range b.Messages() {
			order = append(order, p)
			starts = append(starts, time.Now())
			if err := m.Ack(); err != nil {
				return fmt.Errorf("acking: %w", err)
			}
		}
	}
	w.end(rep, len(order))
	shares(order, starts, start, f.n, rep)
	return nil
}

// spoolRun runs a worker with a no-op handler (plus observe) and
// concurrency conc until n tasks completed.
func spoolRun(ctx context.Context, nc *nats.Conn, f consumeFlags, rep *consumeReport, observe func(*consumer.Task)) error {
	mux := consumer.NewMux()
	mux.HandleFunc("bench", func(ctx context.Context, t *consumer.Task) ([]byte, error) {
		if observe != nil {
			observe(t)
		}
		return nil, nil
	})
	mux.HandleFunc(limitedType, handleLimited)
	opts := []consumer.Option{consumer.WithConcurrency(f.conc, f.conc), consumer.WithProcessingDelay(f.pdelay), consumer.WithEvents(f.events)}
	switch f.task {
	case "pickup":
		opts = []consumer.Option{consumer.WithConcurrency(1, max(f.conc, 1))}
	case "shares":
		opts = append(opts, consumer.WithBoost())
	}
	w, err := consumer.New(nc, mux, opts...)
	if err != nil {
		return fmt.Errorf("creating worker: %w", err)
	}
	var win window
	if f.task == "drain" {
		win = startWindow()
	}
	if err := w.Start(ctx); err != nil {
		return fmt.Errorf("starting worker: %w", err)
	}
	if f.task != "drain" {
		win = startWindow()
	}
	if err := awaitCount(ctx, f.n, "completed", func() uint64 { return completed(w.Stats(), f.countType) }); err != nil {
		return err
	}
	win.end(rep, f.n)
	for _, ts := range w.Stats().Flow {
		for _, n := range ts.Denied {
			rep.HandBacks += n
		}
	}
	sctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := w.Stop(sctx); err != nil {
		return fmt.Errorf("stopping worker: %w", err)
	}
	return nil
}

func quantiles(samples []time.Duration, rep *consumeReport) {
	if len(samples) == 0 {
		return
	}
	slices.Sort(samples)
	us := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }
	rep.P50us = us(samples[len(samples)/2])
	rep.P99us = us(samples[len(samples)*99/100])
	rep.MaxUs = us(samples[len(samples)-1])
}

// shares counts the first window tasks started per priority and the
// longest time the lowest priority went without a start.
func shares(order []spool.Priority, starts []time.Time, begin time.Time, window int, rep *consumeReport) {
	window = min(window, len(order))
	if window == 0 {
		return
	}
	var counts [5]int
	last := begin
	var maxGap time.Duration
	for i, p := range order[:window] {
		counts[p]++
		if p == spool.Idle {
			maxGap = max(maxGap, starts[i].Sub(last))
			last = starts[i]
		}
	}
	maxGap = max(maxGap, starts[window-1].Sub(last))
	for p, c := range counts {
		rep.Shares[p] = 100 * float64(c) / float64(window)
	}
	rep.IdleMaxWait = float64(maxGap.Microseconds()) / 1e3
}
