package main

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/spoolq/spool/consumer"
	"github.com/spoolq/spool/producer"
	"github.com/spoolq/spool/shared/limits"
)

// fairness: a type with a fair rule (limits.Rule.Fair) and a worker of 100
// slots in the harness's process, a no-op handler.
//
// Starvation: one key's backlog of fairBig tasks is enqueued first, then
// 99 keys of fairSmall tasks each. Rows: when the last small key
// completed, how many of the big key's tasks had run, and the seconds
// from the first enqueue to the last small key's completion and to the
// big key's.
//
// Shares: four keys of weights 1, 2, 3 and 4 (windows 3 to 12, 30 in all,
// against a worker of 10 slots: the workers are the bottleneck, as
// fairness needs) with equal backlogs and a handler of 200ms; while every
// key still has a backlog, each key's share of the completions against
// its weight's share (10%, 20%, 30%, 40%). Row: the largest gap in
// percentage points. With a no-op handler the per-key turn's
// compare-and-set (a few round trips per task, one task at a time per
// key), not the workers, limits each key, and the shares come out equal.
func (b *bench) fairness(ctx context.Context) error {
	if b.mode == "SyncAlways" {
		// Fairness is scheduling, not storage: under SyncAlways the
		// 100,000-task backlog would take most of the run fsyncing.
		b.log.Info("fairness runs with default sync only")
		return nil
	}
	big, small := b.cfg.fairBig, b.cfg.fairSmall
	if err := b.purge(ctx); err != nil {
		return err
	}
	b.fairRuns++
	typ := fmt.Sprintf("bench-fair-%d", b.fairRuns) // a fresh type: no turns left by a purged run
	st, err := limits.Open(ctx, b.js, b.names)
	if err != nil {
		return err
	}
	defer func() {
		if err := st.Delete(context.WithoutCancel(ctx), typ); err != nil {
			b.log.Warn("removing the fairness rule", "error", err)
		}
	}()
	weights := map[string]int{"w1": 1, "w2": 2, "w3": 3, "w4": 4}
	if err := st.Put(ctx, limits.Rule{Type: typ, Fair: &limits.Fair{Window: 5, Weights: weights}}); err != nil {
		return err
	}
	var mu sync.Mutex
	var order []string
	// startWorker runs a worker of slots slots whose handler sleeps work
	// and records each completion's key; stop ends it.
	startWorker := func(slots int, work time.Duration) (stop func(), err error) {
		wnc, err := nats.Connect(b.srv.url, nats.Name("spool-bench-fairness-worker"))
		if err != nil {
			return nil, fmt.Errorf("connecting the worker: %w", err)
		}
		mux := consumer.NewMux()
		mux.HandleFunc(typ, func(ctx context.Context, t *consumer.Task) ([]byte, error) {
			if work > 0 {
				time.Sleep(work)
			}
			mu.Lock()
			order = append(order, t.Headers.Get("Spool-Key"))
			mu.Unlock()
			return nil, nil
		})
		w, err := consumer.New(wnc, mux, consumer.WithConcurrency(slots, slots), consumer.WithLogger(slog.New(slog.DiscardHandler)),
			consumer.WithPolling(100*time.Millisecond, 20*time.Millisecond))
		if err == nil {
			err = w.Start(ctx)
		}
		if err != nil {
			wnc.Close()
			return nil, err
		}
		return func() {
			stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
			defer cancel()
			if err := w.Stop(stopCtx); err != nil {
				b.log.Warn("stopping the fairness worker", "error", err)
			}
			wnc.Close()
		}, nil
	}
	stop, err := startWorker(100, 0)
	if err != nil {
		return err
	}
	defer func() { stop() }()
	client, err := producer.New(b.nc, producer.WithTimeout(30*time.Second))
	if err != nil {
		return err
	}
	defer client.Close()
	enqueue := func(key string, n int) error {
		for i := 0; i < n; i += 1000 {
			batch := make([]producer.Task, 0, min(1000, n-i))
			for range cap(batch) {
				batch = append(batch, producer.Task{Type: typ, Key: key, Payload: []byte("1")})
			}
			if _, err := client.EnqueueBatch(ctx, batch); err != nil {
				return fmt.Errorf("enqueueing key %s: %w", key, err)
			}
		}
		return nil
	}
	// wait polls the completions until done says so (the harness measures
	// a drain: a poll every 10ms, not a test's wait).
	wait := func(what string, done func([]string) bool) (time.Time, error) {
		for {
			mu.Lock()
			ok := done(order)
			mu.Unlock()
			if ok {
				return time.Now(), nil
			}
			select {
			case <-ctx.Done():
				return time.Time{}, fmt.Errorf("waiting for %s: %w", what, ctx.Err())
			case <-time.After(10 * time.Millisecond):
			}
		}
	}

	// Starvation.
	start := time.Now()
	if err := enqueue("big", big); err != nil {
		return err
	}
	smallKeys := make([]string, 99)
	for k := range smallKeys {
		smallKeys[k] = fmt.Sprintf("small-%02d", k)
		if err := enqueue(smallKeys[k], small); err != nil {
			return err
		}
	}
	count := func(o []string, key string) int {
		n := 0
		for _, k := range o {
			if k == key {
				n++
			}
		}
		return n
	}
	smallDone, err := wait("the small keys", func(o []string) bool { return len(o)-count(o, "big") >= 99*small })
	if err != nil {
		return err
	}
	mu.Lock()
	bigThen := count(order, "big")
	mu.Unlock()
	bigDone, err := wait("the big key", func(o []string) bool { return len(o) >= big+99*small })
	if err != nil {
		return err
	}
	row := fmt.Sprintf("fairness: 1 key of %d queued first, 99 keys of %d after", big, small)
	b.add(row+": the big key's tasks run before the last small key completed", "spool", float64(bigThen))
	b.add(row+": seconds to the last small key's completion", "spool", smallDone.Sub(start).Seconds())
	b.add(row+": seconds to the big key's completion", "spool", bigDone.Sub(start).Seconds())
	b.log.Info("fairness: starvation", "big", big, "small", small, "big_run_before_small_done", bigThen,
		"small_done_s", smallDone.Sub(start).Seconds(), "big_done_s", bigDone.Sub(start).Seconds())

	// Shares: windows of 3 per weight (30 in all) against a worker of 10
	// slots and a handler of 200ms, so the workers, not the turns, are the
	// bottleneck.
	stop()
	if err := st.Put(ctx, limits.Rule{Type: typ, Fair: &limits.Fair{Window: 3, Weights: weights}}); err != nil {
		return err
	}
	if stop, err = startWorker(10, 200*time.Millisecond); err != nil {
		stop = func() {}
		return err
	}
	mu.Lock()
	order = order[:0]
	mu.Unlock()
	per := max(40, big/100)
	if b.cfg.fairPer > 0 {
		per = b.cfg.fairPer
	}
	keys := slices.Sorted(func(yield func(string) bool) {
		for k := range weights {
			if !yield(k) {
				return
			}
		}
	})
	for _, k := range keys {
		if err := enqueue(k, per); err != nil {
			return err
		}
	}
	// Until the first key's backlog ran out: every key backlogged.
	var window []string
	if _, err := wait("the first key's backlog", func(o []string) bool {
		for _, k := range keys {
			if count(o, k) >= per {
				window = slices.Clone(o)
				return true
			}
		}
		return false
	}); err != nil {
		return err
	}
	worst := 0.0
	for _, k := range keys {
		share := 100 * float64(count(window, k)) / float64(len(window))
		want := 100 * float64(weights[k]) / 10
		worst = max(worst, abs(share-want))
		b.log.Info("fairness: share", "key", k, "weight", weights[k], "share_pct", share, "want_pct", want)
		b.add(fmt.Sprintf("fairness: equal backlogs of %d, weight %d of 10: share of the completions (%%)", per, weights[k]), "spool", share)
	}
	b.add(fmt.Sprintf("fairness: equal backlogs of %d, weights 1:2:3:4: largest gap to the weight's share (pp)", per), "spool", worst)
	if _, err := wait("the shares backlog", func(o []string) bool { return len(o) >= 4*per }); err != nil {
		return err
	}
	return b.purge(ctx)
}

func abs(f float64) float64 {
	if f < 0 {
		return -f
	}
	return f
}
