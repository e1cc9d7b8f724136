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
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	var last int64
	progress := time.Now()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
		n := done.Load()
		if n >= int64(f.n) {
			break
		}
		if n != last {
			last, progress = n, time.Now()
		} else if time.Since(progress) > stallLimit {
			return fmt.Errorf("asynq: no task handled for %s (%d of %d done)", stallLimit, n, f.n)
		}
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
