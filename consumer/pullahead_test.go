package consumer_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/spoolq/spool/consumer"
	spool "github.com/spoolq/spool/shared"
	"github.com/spoolq/spool/streams"
	"github.com/spoolq/spool/streams/streamstest"
)

// Short tasks are pulled ahead of the free slots and wait in the worker's
// queue. Stopping mid-drain strands none of them: a graceful stop runs the
// queued tasks, a hard stop (a ctx already done) hands them back, and the
// tasks of a fetch still out are handed back as they arrive. A second
// worker then finishes the queue well within the AckWait (10 minutes) that
// a stranded task would wait, and every task runs exactly once.
func TestStopSettlesTasksPulledAhead(t *testing.T) {
	t.Parallel()
	for _, hard := range []bool{false, true} {
		t.Run(fmt.Sprintf("hard=%v", hard), func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, streams.Settings{AckWait: 10 * time.Minute})
			const n = 1000
			e.publishMany(spool.Normal, "work", n, nil)
			var ran atomic.Int64
			mux := consumer.NewMux()
			mux.HandleFunc("work", func(context.Context, *consumer.Task) ([]byte, error) {
				ran.Add(1)
				return nil, nil
			})
			first := e.worker(mux, consumer.WithConcurrency(2, 2))
			streamstest.WaitFor(t, 30*time.Second, func() error {
				if ran.Load() < n/4 {
					return errors.New("a quarter of the tasks run")
				}
				return nil
			})
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			if hard {
				cancel()
			}
			err := first.Stop(ctx)
			cancel()
			if err != nil && !hard {
				t.Fatalf("stopping: %v", err)
			}
			<-first.Stopped()
			done := first.Stats().Priorities[spool.Normal].Completed
			if !hard && int64(done) != ran.Load() {
				t.Fatalf("graceful stop: %d tasks run, %d completed", ran.Load(), done)
			}

			done += finishQueue(t, e, mux)
			if got := ran.Load(); done != n || got != n {
				t.Fatalf("%d runs and %d completions of %d tasks, want each once", got, done, n)
			}
		})
	}
}

// Tasks pulled ahead wait while every slot is busy: a graceful stop runs
// them once the slots free, a hard stop hands them back (with the
// cancelled running ones) for the next worker, which runs each at once
// (well within the 10-minute AckWait a stranded task would wait).
func TestStopWithTasksQueued(t *testing.T) {
	t.Parallel()
	for _, hard := range []bool{false, true} {
		t.Run(fmt.Sprintf("hard=%v", hard), func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, streams.Settings{AckWait: 10 * time.Minute})
			const n, fast = 400, 200
			e.publishMany(spool.Normal, "work", n, nil)
			var ran atomic.Int64
			gate := make(chan struct{}) // closed to let the blocked handlers return
			mux := consumer.NewMux()
			mux.HandleFunc("work", func(ctx context.Context, _ *consumer.Task) ([]byte, error) {
				// The first fast tasks teach the worker that tasks are
				// short (so it pulls ahead); the next ones block.
				if ran.Add(1) > fast {
					select {
					case <-gate:
					case <-ctx.Done():
						return nil, ctx.Err()
					}
				}
				return nil, nil
			})
			first := e.worker(mux, consumer.WithConcurrency(2, 2))
			streamstest.WaitFor(t, 30*time.Second, func() error {
				if st := first.Stats(); st.Busy != 2 || st.Queued == 0 {
					return fmt.Errorf("%d busy, %d queued: want both slots blocked and tasks queued", st.Busy, st.Queued)
				}
				return nil
			})
			queued := first.Stats().Queued
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if hard {
				cancel()
			}
			stopped := make(chan error, 1)
			go func() { stopped <- first.Stop(ctx) }()
			if !hard {
				close(gate)
			}
			if err := <-stopped; err != nil && !hard {
				t.Fatalf("stopping: %v", err)
			}
			<-first.Stopped()
			st := first.Stats()
			done := st.Priorities[spool.Normal].Completed
			if st.Queued != 0 {
				t.Fatalf("%d tasks still queued after Stop", st.Queued)
			}
			if !hard && int64(done) != ran.Load() {
				t.Fatalf("graceful stop with %d queued: %d tasks run, %d completed", queued, ran.Load(), done)
			}
			if hard {
				close(gate)
			}

			done += finishQueue(t, e, mux)
			if done != n {
				t.Fatalf("%d completions of %d tasks, want each once", done, n)
			}
		})
	}
}

// finishQueue runs a second worker until the task stream is empty, within
// a minute (a task stranded by the first worker would wait for its
// 10-minute AckWait), and returns the tasks it completed.
func finishQueue(t *testing.T, e *env, mux *consumer.Mux) uint64 {
	t.Helper()
	second := e.worker(mux, consumer.WithConcurrency(2, 2))
	streamstest.WaitFor(t, time.Minute, func() error {
		if left := e.taskMsgs(); left != 0 {
			return fmt.Errorf("%d tasks left (a task stranded at the first worker's stop waits for its AckWait)", left)
		}
		return nil
	})
	return second.Stats().Priorities[spool.Normal].Completed
}
