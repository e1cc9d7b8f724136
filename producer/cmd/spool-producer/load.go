package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spoolq/spool/producer"
	spool "github.com/spoolq/spool/shared"
	"github.com/spoolq/spool/streams/admin"
)

// loadSpec is what load generates.
type loadSpec struct {
	count    int
	duration time.Duration
	rate     float64
	mix      []spool.Priority // one cycle of the weighted priority mix
	typ      string
	size     int
	batch    int
	progress time.Duration
}

// demoEcho is the demo handler's type (consumer/demo.Echo; the producer
// does not import the consumer): a first load test against
// `spool-consumer --demo` completes instead of filling the DLQ.
const demoEcho = "demo.echo"

// warnUnserved warns when no worker serves typ (admin.Serving): every
// task would wait in the queue, or be dead-lettered with reason
// no_handler. A fleet that cannot be read gives no warning.
func warnUnserved(ctx context.Context, s *session, cfg Config, typ string, w io.Writer) {
	adm, err := admin.New(s.nc, admin.WithNames(cfg.Names()), admin.WithLogger(s.logger))
	if err != nil {
		return
	}
	sv, err := adm.Serving(ctx)
	if err != nil {
		s.logger.Debug("reading which task types the workers serve", "error", err)
		return
	}
	if msg := sv.Unserved(typ); msg != "" {
		fmt.Fprintf(w, "warning: %s; pick a served type with --type\n", msg)
	}
}

// parseMix parses "critical=1,high=2,normal=4" into one cycle of priorities
// in which each appears as often as its weight.
func parseMix(s string) ([]spool.Priority, error) {
	var cycle []spool.Priority
	seen := map[spool.Priority]bool{}
	for part := range strings.SplitSeq(s, ",") {
		name, w, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok {
			w = "1"
		}
		p, err := spool.ParsePriority(name)
		if err != nil {
			return nil, errors.New(spool.Detail(err))
		}
		if seen[p] {
			return nil, fmt.Errorf("%s given twice", p)
		}
		seen[p] = true
		n, err := strconv.Atoi(w)
		if err != nil || n < 0 || n > 1000 {
			return nil, fmt.Errorf("weight %q of %s must be a whole number 0 to 1000", w, p)
		}
		for range n {
			cycle = append(cycle, p)
		}
	}
	if len(cycle) == 0 {
		return nil, errors.New("all weights are zero")
	}
	// Interleave so a short run still follows the mix: sort by position
	// within each priority's share.
	pos := map[spool.Priority]int{}
	type slot struct {
		p   spool.Priority
		key float64
	}
	slots := make([]slot, len(cycle))
	counts := map[spool.Priority]int{}
	for _, p := range cycle {
		counts[p]++
	}
	for i, p := range cycle {
		slots[i] = slot{p, (float64(pos[p]) + 0.5) / float64(counts[p])}
		pos[p]++
	}
	slices.SortStableFunc(slots, func(a, b slot) int {
		switch {
		case a.key < b.key:
			return -1
		case a.key > b.key:
			return 1
		}
		return int(a.p) - int(b.p)
	})
	for i, s := range slots {
		cycle[i] = s.p
	}
	return cycle, nil
}

func runLoad(ctx context.Context, cfg Config, env *cmdEnv, args []string) error {
	fs := newFlags("load", "spool-producer load (--count N | --duration D) [--rate R] [--mix P=W,...] [flags]", env)
	var spec loadSpec
	fs.IntVar(&spec.count, "count", 0, "tasks to enqueue (0: no limit; set --count or --duration)")
	fs.DurationVar(&spec.duration, "duration", 0, "how long to run (0: no limit; set --count or --duration)")
	fs.Float64Var(&spec.rate, "rate", 0, "tasks per second (0: as fast as possible)")
	mix := fs.String("mix", "normal=1", "priority mix, e.g. critical=1,high=2,normal=4")
	fs.StringVar(&spec.typ, "type", demoEcho, "task type (default: the demo handler `spool-consumer --demo` serves)")
	fs.IntVar(&spec.size, "size", 256, "payload size in bytes")
	fs.IntVar(&spec.batch, "batch", 500, "tasks per batch publish")
	fs.DurationVar(&spec.progress, "progress", time.Second, "progress line interval (0: none)")
	window := fs.Int("window", producer.DefaultPublishWindow, "asynchronous publishes in flight")
	pos, err := fs.parse(args)
	if err != nil {
		return err
	}
	switch {
	case len(pos) > 0:
		return fmt.Errorf("load takes no arguments, got %q", pos)
	case spec.count < 0:
		return fmt.Errorf("--count %d must not be negative", spec.count)
	case spec.duration < 0:
		return fmt.Errorf("--duration %s must not be negative", spec.duration)
	case spec.count == 0 && spec.duration == 0:
		return errors.New("set --count or --duration (or both: load stops at the first reached)")
	case spec.rate < 0:
		return fmt.Errorf("--rate %g must not be negative", spec.rate)
	case spec.size < 0 || spec.size > 64<<20:
		return fmt.Errorf("--size %d must be 0 to %d bytes", spec.size, 64<<20)
	case spec.batch < 1 || spec.batch > 100_000:
		return fmt.Errorf("--batch %d must be 1 to 100000", spec.batch)
	case *window < 1 || *window > 1<<20:
		return fmt.Errorf("--window %d must be 1 to %d", *window, 1<<20)
	case spec.progress < 0:
		return fmt.Errorf("--progress %s must not be negative", spec.progress)
	}
	if err := spool.ValidateType(spec.typ); err != nil {
		return fmt.Errorf("--type: %w", err)
	}
	if spec.mix, err = parseMix(*mix); err != nil {
		return fmt.Errorf("--mix %q: %w", *mix, err)
	}
	s, err := connect(ctx, cfg, fs, true, producer.WithPublishWindow(*window))
	if err != nil {
		return err
	}
	defer s.close()
	warnUnserved(ctx, s, cfg, spec.typ, env.stderr)
	sum, err := generate(ctx, s.client, spec, env.stderr)
	sum.print(env.stdout)
	return err
}

// loadSummary tallies a load run.
type loadSummary struct {
	enqueued, failed, duplicates int
	byPriority                   [len(spool.Priorities)]int
	errors                       map[string]int
	batchTimes                   []time.Duration
	elapsed                      time.Duration
}

func (s *loadSummary) rate() float64 {
	if s.elapsed <= 0 {
		return 0
	}
	return float64(s.enqueued) / s.elapsed.Seconds()
}

func (s *loadSummary) print(w io.Writer) {
	fmt.Fprintf(w, "load: %d enqueued, %d failed, %d duplicates in %s (%.0f tasks/s)\n",
		s.enqueued, s.failed, s.duplicates, s.elapsed.Round(time.Millisecond), s.rate())
	var parts []string
	for _, p := range spool.Priorities {
		if n := s.byPriority[p]; n > 0 {
			parts = append(parts, fmt.Sprintf("%s=%d", p, n))
		}
	}
	if len(parts) > 0 {
		fmt.Fprintf(w, "  by priority: %s\n", strings.Join(parts, " "))
	}
	if n := len(s.batchTimes); n > 0 {
		bt := slices.Clone(s.batchTimes)
		slices.Sort(bt)
		fmt.Fprintf(w, "  batch latency: p50 %s p99 %s max %s over %d batches\n",
			bt[n/2].Round(time.Microsecond), bt[n*99/100].Round(time.Microsecond), bt[n-1].Round(time.Microsecond), n)
	}
	for msg, n := range s.errors {
		fmt.Fprintf(w, "  error x%d: %s\n", n, msg)
	}
}

// generate runs the load until the count or duration is reached or ctx
// ends, writing a progress line to progress.
func generate(ctx context.Context, client *producer.Client, spec loadSpec, progress io.Writer) (*loadSummary, error) {
	sum := &loadSummary{errors: map[string]int{}}
	payload := make([]byte, spec.size)
	for i := range payload {
		payload[i] = 'a' + byte(i%26)
	}
	start := time.Now()
	var end time.Time
	if spec.duration > 0 {
		end = start.Add(spec.duration)
	}
	lastProgress := start
	sent, next := 0, 0
	tasks := make([]producer.Task, 0, spec.batch)
	for {
		now := time.Now()
		if spec.count > 0 && sent >= spec.count || !end.IsZero() && !now.Before(end) || ctx.Err() != nil {
			break
		}
		n := spec.batch
		if spec.count > 0 {
			n = min(n, spec.count-sent)
		}
		if spec.rate > 0 {
			due := int(spec.rate*now.Sub(start).Seconds()) + 1 - sent
			if due <= 0 {
				wake := start.Add(time.Duration(float64(sent) / spec.rate * float64(time.Second)))
				if !end.IsZero() && wake.After(end) {
					wake = end
				}
				t := time.NewTimer(time.Until(wake))
				select {
				case <-ctx.Done():
				case <-t.C:
				}
				t.Stop()
				continue
			}
			n = min(n, due)
		}
		tasks = tasks[:0]
		for range n {
			tasks = append(tasks, producer.Task{Type: spec.typ, Priority: &spec.mix[next%len(spec.mix)], Payload: payload}) // the priority is shared, never written
			next++
		}
		bstart := time.Now()
		results, _ := client.EnqueueBatch(ctx, tasks) // per-task errors are tallied below
		sum.batchTimes = append(sum.batchTimes, time.Since(bstart))
		for i, r := range results {
			switch {
			case r.Err != nil:
				sum.failed++
				sum.errors[errorClass(r.Err)]++
			case r.Duplicate:
				sum.duplicates++
			default:
				sum.enqueued++
				sum.byPriority[tasks[i].PriorityOrDefault()]++
			}
		}
		sent += n
		if spec.progress > 0 && time.Since(lastProgress) >= spec.progress {
			lastProgress = time.Now()
			el := lastProgress.Sub(start)
			fmt.Fprintf(progress, "\rload: %d enqueued, %d failed, %.0f tasks/s, %s elapsed   ",
				sum.enqueued, sum.failed, float64(sum.enqueued)/el.Seconds(), el.Round(time.Second))
		}
	}
	sum.elapsed = time.Since(start)
	if spec.progress > 0 && sum.elapsed >= spec.progress {
		fmt.Fprintln(progress)
	}
	if sum.failed > 0 {
		return sum, fmt.Errorf("%d of %d tasks not enqueued", sum.failed, sum.failed+sum.enqueued+sum.duplicates)
	}
	if err := ctx.Err(); err != nil && sum.enqueued == 0 {
		return sum, err
	}
	return sum, nil
}

// errorClass names a failure without the task id, so failures add up.
func errorClass(err error) string {
	for _, known := range []error{producer.ErrQueueFull, producer.ErrNotProvisioned, producer.ErrUniqueConflict,
		producer.ErrPayloadTooLarge, context.DeadlineExceeded, context.Canceled} {
		if errors.Is(err, known) {
			return known.Error()
		}
	}
	for {
		inner := errors.Unwrap(err)
		if inner == nil {
			break
		}
		err = inner
	}
	s := err.Error()
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	return s
}
