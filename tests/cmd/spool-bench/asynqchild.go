package main

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hibiken/asynq"
)

// asynqConsume is the consume child's asynq side: an asynq Server on the
// Redis at f.url with Concurrency f.conc, asynq's defaults otherwise, and
// a no-op handler. drain measures from before Start until f.n handlers
// returned (as Spool's drain counts completed tasks); pickup measures
// from the enqueue time in each payload to the handler's start.
func asynqConsume(ctx context.Context, f consumeFlags, rep *consumeReport) error {
	if f.task != "drain" && f.task != "pickup" {
		return fmt.Errorf("asynq: unknown task %q (drain or pickup)", f.task)
	}
	var done atomic.Int64
	var mu sync.Mutex
	var samples []time.Duration
	var badPayload error
	handler := asynq.HandlerFunc(func(_ context.Context, t *asynq.Task) error {
		if f.task == "pickup" {
			at, err := stampTime(t.Payload())
			mu.Lock()
			if err != nil {
				badPayload = err
			} else {
				samples = append(samples, time.Since(at))
			}
			mu.Unlock()
		}
		done.Add(1)
		return nil
	})
	srv := asynq.NewServer(asynq.RedisClientOpt{Addr: f.url}, asynq.Config{
		Concurrency:       f.conc,
		TaskCheckInterval: f.asynqPoll,
		Queues:            map[string]int{asynqQueue: 1},
		LogLevel:          asynq.WarnLevel,
	})
	var win window
	if f.task == "drain" {
		win = startWindow()
	}
	if err := srv.Start(handler); err != nil {
		return fmt.Errorf("starting the asynq server: %w", err)
	}
	defer srv.Shutdown()
	if f.task != "drain" {
		win = startWindow()
	}
	if err := awaitCount(ctx, f.n, "handled by asynq", func() uint64 { return uint64(done.Load()) }); err != nil {
		return err
	}
	win.end(rep, f.n)
	mu.Lock()
	defer mu.Unlock()
	if badPayload != nil {
		return badPayload
	}
	if f.task == "pickup" {
		quantiles(samples, rep)
	}
	return nil
}

// awaitCount looks at the count every awaitTick, and every run's time /
// awaitShare once that is longer, at most every awaitMax.
const (
	awaitTick  = 2 * time.Millisecond
	awaitShare = 500
	awaitMax   = 20 * time.Millisecond
)

// awaitCount polls count until it reaches n; it fails when the count
// stands still for stallLimit (what names the tasks counted).
func awaitCount(ctx context.Context, n int, what string, count func() uint64) error {
	begin := time.Now()
	tick := time.NewTimer(awaitTick)
	defer tick.Stop()
	var last uint64
	progress := begin
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
		// A long run is looked at less often: the looks cost CPU, which
		// is billed to its tasks, and the end is as precise in share of
		// the run.
		tick.Reset(min(max(awaitTick, time.Since(begin)/awaitShare), awaitMax))
		c := count()
		if c >= uint64(n) {
			return nil
		}
		if c != last {
			last, progress = c, time.Now()
		} else if time.Since(progress) > stallLimit {
			return fmt.Errorf("no task %s for %s (%d of %d done)", what, stallLimit, c, n)
		}
	}
}
