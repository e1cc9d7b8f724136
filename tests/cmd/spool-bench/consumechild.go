package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"runtime/pprof"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/spoolq/spool/consumer"
	spool "github.com/spoolq/spool/shared"
)

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
	// StartSpan is the time from the first handler start to the last
	// (spool drain), in seconds: the rate reached leaves out the
	// worker's start.
	StartSpan float64 `json:"start_span"`
	// MostInSecond is the most handler starts in any window of a second
	// [t, t+1s) (spool drain): a rate limit per second must not be
	// above it.
	MostInSecond int `json:"most_in_second"`
	// OutMsgs and InMsgs count the messages a spool worker's connection
	// sent and received over the measured window.
	OutMsgs uint64 `json:"out_msgs"`
	InMsgs  uint64 `json:"in_msgs"`
}

type consumeFlags struct {
	url, mode, task string
	n, conc         int
	pdelay          time.Duration
	events          bool
	discard         bool          // spool: discard every result (WithDiscardResults)
	countType       string        // drain: count the completions of this type only
	asynqPoll       time.Duration // asynq: Config.TaskCheckInterval (0: its default, 1s)
	// types, when set, is the exact types the spool worker serves (see
	// typeNames) in place of bench; sleep is how long their handler
	// sleeps.
	types string
	sleep time.Duration
	// rate paces a raw drain's acks to at most rate per second (0: no
	// pacing), the rate limit a user first writes by hand; consumer is
	// the consumer a raw run binds (default: the normal priority's).
	rate     int
	consumer string
	keySlots bool // raw-keyed: take a slot per key (false: the same pool without)
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
	fs.BoolVar(&f.discard, "discard", false, "spool: discard the result of every task (WithDiscardResults)")
	fs.StringVar(&f.countType, "count-type", "", "spool drain: count the completions of this task type only (default: all)")
	fs.DurationVar(&f.asynqPoll, "asynq-poll", 0, "asynq: TaskCheckInterval (0: asynq's default, 1s)")
	fs.StringVar(&f.types, "types", "", "spool: serve these exact types instead of bench: <prefix>:<count> (pick:50 is pick.00 … pick.49) or a comma-separated list")
	fs.DurationVar(&f.sleep, "sleep", 0, "spool: how long the handler of -types sleeps")
	fs.IntVar(&f.rate, "rate", 0, "raw drain: ack at most this many tasks per second (0: no pacing)")
	fs.StringVar(&f.consumer, "consumer", "", "raw: bind this consumer (default: the normal priority's)")
	fs.BoolVar(&f.keySlots, "key-slots", true, "raw-keyed: take a KV slot for each task's key")
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
	case f.task == "drain" && f.mode == "raw-keyed":
		err = rawKeyed(ctx, js, names, f, &rep)
	case f.task == "drain" && f.mode == "raw-results":
		err = rawResults(ctx, js, names, f, false, &rep)
	case f.task == "drain" && f.mode == "raw-duty":
		err = rawResults(ctx, js, names, f, true, &rep)
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

// spoolRun runs a worker with a no-op handler (plus observe) and
// concurrency conc until n tasks completed.
func spoolRun(ctx context.Context, nc *nats.Conn, f consumeFlags, rep *consumeReport, observe func(*consumer.Task)) error {
	mux := consumer.NewMux()
	var (
		spanMu sync.Mutex
		starts []time.Time
	)
	handle := func(ctx context.Context, t *consumer.Task) ([]byte, error) {
		if observe != nil {
			observe(t)
		}
		now := time.Now()
		spanMu.Lock()
		starts = append(starts, now)
		spanMu.Unlock()
		if f.sleep > 0 {
			select {
			case <-time.After(f.sleep):
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		return nil, nil
	}
	if f.types == "" {
		mux.HandleFunc("bench", handle)
		mux.HandleFunc(limitedType, handleLimited)
	} else {
		types, err := parseTypes(f.types)
		if err != nil {
			return err
		}
		for _, typ := range types {
			mux.HandleFunc(typ, handle)
		}
	}
	opts := []consumer.Option{consumer.WithConcurrency(f.conc, f.conc), consumer.WithProcessingDelay(f.pdelay), consumer.WithEvents(f.events)}
	if f.discard {
		opts = append(opts, consumer.WithDiscardResults(">"))
	}
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
	var s0 nats.Statistics
	if f.task == "drain" {
		win = startWindow()
		s0 = nc.Stats()
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
	spanMu.Lock()
	rep.StartSpan, rep.MostInSecond = startWindows(starts)
	spanMu.Unlock()
	s1 := nc.Stats()
	rep.OutMsgs, rep.InMsgs = s1.OutMsgs-s0.OutMsgs, s1.InMsgs-s0.InMsgs
	for _, ts := range w.Stats().Flow {
		for _, n := range ts.Denied {
			rep.HandBacks += n
		}
	}
	sctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	stopped := time.Now()
	if err := w.Stop(sctx); err != nil {
		return fmt.Errorf("stopping worker: %w", err)
	}
	if d := time.Since(stopped); d > time.Second {
		fmt.Fprintf(os.Stderr, "spool-bench consume: the worker took %s to stop\n", d.Round(time.Millisecond))
	}
	return nil
}

// startWindows returns the time from the first start to the last, in
// seconds, and the most starts in any half-open window of a second.
func startWindows(starts []time.Time) (span float64, most int) {
	s := slices.Clone(starts)
	slices.SortFunc(s, func(a, b time.Time) int { return a.Compare(b) })
	j := 0
	for i := range s {
		for j < len(s) && s[j].Before(s[i].Add(time.Second)) {
			j++
		}
		most = max(most, j-i)
	}
	if len(s) > 1 {
		span = s[len(s)-1].Sub(s[0]).Seconds()
	}
	return span, most
}
