package consumer_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/spoolq/spool/consumer"
	spool "github.com/spoolq/spool/shared"
	"github.com/spoolq/spool/streams"
	"github.com/spoolq/spool/streams/streamstest"
)

// Benchmarks compare the worker with raw JetStream (fetch + ack on the same
// stream and consumers) in the same run. Run them once:
//
//	go test -run '^$' -bench . -benchtime 1x ./consumer/
//
// make bench (tests/cmd/spool-bench) measures the same and more with the
// server and the consumer in processes of their own, and writes
// BENCHMARKS.md.
var (
	benchTasks       = flag.Int("spool.bench.tasks", 20_000, "tasks pre-filled for the throughput benchmark")
	benchSlots       = flag.Int("spool.bench.slots", 256, "worker slots in the throughput and latency benchmarks")
	benchRate        = flag.Int("spool.bench.rate", 200, "tasks per second in the pickup latency benchmark")
	benchLatencyRuns = flag.Int("spool.bench.latency_tasks", 600, "tasks per pickup latency run")
	// On nats-server 2.15.2 / nats.go 1.55.0 a Fetch+Ack loop drains at
	// ~100k/s with batches of 32 but drops to ~17k/s from batches of 48 up:
	// the raw baseline uses its best batch size.
	benchRawBatch = flag.Int("spool.bench.raw_batch", 32, "fetch batch of the raw JetStream baseline")
)

var benchLogger = slog.New(slog.DiscardHandler)

// benchWorker starts a worker with a no-op handler for every type.
func benchWorker(b *testing.B, e *env, h consumer.HandlerFunc, opts ...consumer.Option) *consumer.Worker {
	b.Helper()
	mux := consumer.NewMux()
	mux.Handle("bench", h)
	base := []consumer.Option{consumer.WithLogger(benchLogger), consumer.WithConcurrency(*benchSlots, *benchSlots)}
	w, err := consumer.New(e.nc, mux, append(base, opts...)...)
	if err != nil {
		b.Fatal(err)
	}
	if err := w.Start(testCtx(b)); err != nil {
		b.Fatal(err)
	}
	return w
}

func stopWorker(b *testing.B, w *consumer.Worker) {
	b.Helper()
	if err := w.Stop(testCtx(b)); err != nil {
		b.Fatal(err)
	}
}

func noop(ctx context.Context, t *consumer.Task) ([]byte, error) { return nil, nil }

// BenchmarkThroughput drains a pre-filled queue of normal tasks: raw
// JetStream (Fetch of raw_batch + Ack, no results) against the worker
// (no-op handler, processing and completed results written: three
// JetStream writes per task where raw makes one).
func BenchmarkThroughput(b *testing.B) {
	n := *benchTasks
	payload := func(i int) []byte { return []byte(`{"n":1}`) }
	var raw float64
	b.Run("raw", func(b *testing.B) {
		e := newEnv(b, streams.Settings{})
		cons, err := e.js.Consumer(testCtx(b), e.names.TaskStream(), e.names.Consumer(spool.Normal))
		if err != nil {
			b.Fatal(err)
		}
		var busy time.Duration
		var done int
		for b.Loop() {
			b.StopTimer()
			e.publishMany(spool.Normal, "bench", n, payload)
			b.StartTimer()
			start := time.Now()
			for got := 0; got < n; {
				batch, err := cons.Fetch(min(*benchRawBatch, n-got), jetstream.FetchMaxWait(time.Second))
				if err != nil {
					b.Fatal(err)
				}
				for m := range batch.Messages() {
					if err := m.Ack(); err != nil {
						b.Fatal(err)
					}
					got++
				}
			}
			if err := e.nc.Flush(); err != nil {
				b.Fatal(err)
			}
			busy += time.Since(start)
			done += n
		}
		raw = float64(done) / busy.Seconds()
		b.ReportMetric(raw, "tasks/s")
	})
	worker := func(name string, opts ...consumer.Option) {
		b.Run(name, func(b *testing.B) {
			e := newEnv(b, streams.Settings{})
			var busy time.Duration
			var done int
			for b.Loop() {
				b.StopTimer()
				e.publishMany(spool.Normal, "bench", n, payload)
				b.StartTimer()
				start := time.Now()
				w := benchWorker(b, e, noop, opts...)
				streamstest.WaitFor(b, 5*time.Minute, func() error {
					if w.Stats().Total().Completed < uint64(n) {
						return errors.New("queue drained")
					}
					return nil
				})
				busy += time.Since(start)
				done += n
				b.StopTimer()
				stopWorker(b, w)
				b.StartTimer()
			}
			rate := float64(done) / busy.Seconds()
			b.ReportMetric(rate, "tasks/s")
			if raw > 0 {
				b.ReportMetric(100*rate/raw, "%_of_raw")
			}
		})
	}
	// Every state written: processing, completed.
	worker("worker")
	// Processing written only for attempts running over 100ms: one
	// result write per task.
	worker("worker_processing_delay", consumer.WithProcessingDelay(100*time.Millisecond))
}

// BenchmarkPickupLatency publishes tasks one by one at a steady rate to an
// idle consumer and measures enqueue (stream timestamp) → handler start:
// raw JetStream (a waiting Fetch(1) loop) against the worker (long-polls).
func BenchmarkPickupLatency(b *testing.B) {
	var rawP99 time.Duration
	report := func(b *testing.B, samples []time.Duration) (p50, p99 time.Duration) {
		slices.Sort(samples)
		p50 = samples[len(samples)/2]
		p99 = samples[len(samples)*99/100]
		b.ReportMetric(float64(p50.Microseconds()), "p50_µs")
		b.ReportMetric(float64(p99.Microseconds()), "p99_µs")
		return p50, p99
	}
	publishPaced := func(b *testing.B, e *env, n int) {
		tick := time.NewTicker(time.Second / time.Duration(*benchRate))
		defer tick.Stop()
		subject, _ := e.names.TaskSubject(spool.Normal, "bench")
		for range n {
			<-tick.C
			if _, err := e.js.PublishAsync(subject, nil); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.Run("raw", func(b *testing.B) {
		runtime.GC() // start clean of earlier benchmarks' garbage
		e := newEnv(b, streams.Settings{})
		cons, err := e.js.Consumer(testCtx(b), e.names.TaskStream(), e.names.Consumer(spool.Normal))
		if err != nil {
			b.Fatal(err)
		}
		var samples []time.Duration
		for b.Loop() {
			n := *benchLatencyRuns
			var wg sync.WaitGroup
			wg.Go(func() {
				for got := 0; got < n; {
					batch, err := cons.Fetch(1, jetstream.FetchMaxWait(5*time.Second))
					if err != nil {
						b.Error(err)
						return
					}
					for m := range batch.Messages() {
						md, err := m.Metadata()
						if err != nil {
							b.Error(err)
							return
						}
						samples = append(samples, time.Since(md.Timestamp))
						if err := m.Ack(); err != nil {
							b.Error(err)
						}
						got++
					}
				}
			})
			publishPaced(b, e, n)
			wg.Wait()
		}
		_, rawP99 = report(b, samples)
	})
	b.Run("worker", func(b *testing.B) {
		runtime.GC()
		e := newEnv(b, streams.Settings{})
		var mu sync.Mutex
		var samples []time.Duration
		w := benchWorker(b, e, func(ctx context.Context, t *consumer.Task) ([]byte, error) {
			d := time.Since(t.EnqueuedAt)
			mu.Lock()
			samples = append(samples, d)
			mu.Unlock()
			return nil, nil
		}, consumer.WithConcurrency(1, *benchSlots))
		defer stopWorker(b, w)
		for b.Loop() {
			n := *benchLatencyRuns
			before := w.Stats().Total().Completed
			publishPaced(b, e, n)
			streamstest.WaitFor(b, time.Minute, func() error {
				if w.Stats().Total().Completed < before+uint64(n) {
					return errors.New("all picked up")
				}
				return nil
			})
		}
		mu.Lock()
		defer mu.Unlock()
		_, p99 := report(b, samples)
		if rawP99 > 0 {
			b.ReportMetric(float64(p99)/float64(rawP99), "p99_x_raw")
		}
	})
}

// BenchmarkPriorityShares saturates all five priorities and reports the
// share of the first tasks started per priority against the weight share:
// raw JetStream (round-robin Fetch over the five consumers) against the
// worker's weighted scheduler.
func BenchmarkPriorityShares(b *testing.B) {
	const perPriority = 2000
	const window = 4000 // critical's share (41.7%) stays within its 2000
	const shareSlots = 8
	weights := consumer.DefaultWeights()
	var sum float64
	for _, w := range weights {
		sum += w
	}
	prefill := func(e *env) {
		for _, p := range spool.Priorities {
			e.publishMany(p, "bench", perPriority, nil)
		}
	}
	report := func(b *testing.B, order []spool.Priority) {
		var counts [5]int
		for _, p := range order[:window] {
			counts[p]++
		}
		var maxErr float64
		for _, p := range spool.Priorities {
			share := 100 * float64(counts[p]) / window
			want := 100 * weights[p] / sum
			b.ReportMetric(share, p.String()+"_%")
			maxErr = max(maxErr, share-want, want-share)
		}
		b.ReportMetric(maxErr, "max_err_pp")
		b.Logf("configured shares: critical %.1f%% high %.1f%% normal %.1f%% low %.1f%% idle %.1f%%",
			100*weights[0]/sum, 100*weights[1]/sum, 100*weights[2]/sum, 100*weights[3]/sum, 100*weights[4]/sum)
	}
	b.Run("raw", func(b *testing.B) {
		e := newEnv(b, streams.Settings{})
		var cons [5]jetstream.Consumer
		for _, p := range spool.Priorities {
			c, err := e.js.Consumer(testCtx(b), e.names.TaskStream(), e.names.Consumer(p))
			if err != nil {
				b.Fatal(err)
			}
			cons[p] = c
		}
		var order []spool.Priority
		for b.Loop() {
			b.StopTimer()
			prefill(e)
			b.StartTimer()
			order = order[:0]
			for i := 0; len(order) < window; i++ {
				p := spool.Priorities[i%5]
				batch, err := cons[p].FetchNoWait(shareSlots)
				if err != nil {
					b.Fatal(err)
				}
				for m := range batch.Messages() {
					order = append(order, p)
					if err := m.Ack(); err != nil {
						b.Fatal(err)
					}
				}
			}
			b.StopTimer()
			drain(b, e)
			b.StartTimer()
		}
		report(b, order)
	})
	b.Run("worker", func(b *testing.B) {
		e := newEnv(b, streams.Settings{})
		var order []spool.Priority
		for b.Loop() {
			b.StopTimer()
			prefill(e)
			b.StartTimer()
			var mu sync.Mutex
			order = order[:0]
			var started atomic.Int64
			w := benchWorker(b, e, func(ctx context.Context, t *consumer.Task) ([]byte, error) {
				mu.Lock()
				order = append(order, t.Priority)
				mu.Unlock()
				started.Add(1)
				return nil, nil
			}, consumer.WithBoost(), consumer.WithConcurrency(shareSlots, shareSlots))
			streamstest.WaitFor(b, 5*time.Minute, func() error {
				if started.Load() < window {
					return errors.New("window")
				}
				return nil
			})
			b.StopTimer()
			stopWorker(b, w)
			drain(b, e)
			b.StartTimer()
		}
		report(b, order)
	})
}

// drain empties the task stream between iterations.
func drain(b *testing.B, e *env) {
	b.Helper()
	s, err := e.js.Stream(testCtx(b), e.names.TaskStream())
	if err != nil {
		b.Fatal(err)
	}
	if err := s.Purge(testCtx(b)); err != nil {
		b.Fatal(fmt.Errorf("purging tasks: %w", err))
	}
}
