package consumer_test

import (
	"errors"
	"runtime"
	"testing"
	"time"

	"github.com/spoolq/spool/consumer"
	spool "github.com/spoolq/spool/shared"
	"github.com/spoolq/spool/streams"
	"github.com/spoolq/spool/streams/streamstest"
)

// maxAllocsPerTask bounds the heap allocations of the whole process, the
// embedded server included, per plain task a worker drains: a no-op
// handler, every state written, events on. A drain makes about 84 per
// task, and about 90 under -race: the bound leaves room for the server's
// share to vary with load, and fails when the worker's per-attempt cost
// grows by twenty allocations or more.
const maxAllocsPerTask = 110

// TestAllocsPerPlainTask drains 2,000 plain tasks through a worker on a
// real embedded server and counts the process's heap allocations per
// task. It runs under -race too: the bound holds with and without it.
func TestAllocsPerPlainTask(t *testing.T) {
	const n = 2_000
	e := newEnv(t, streams.Settings{})
	e.publishMany(spool.Normal, "bench", n, func(int) []byte { return []byte(`{"n":1}`) })
	mux := consumer.NewMux()
	mux.Handle("bench", consumer.HandlerFunc(noop))
	w, err := consumer.New(e.nc, mux, consumer.WithLogger(benchLogger), consumer.WithConcurrency(10, 10))
	if err != nil {
		t.Fatal(err)
	}
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	if err := w.Start(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	streamstest.WaitFor(t, 2*time.Minute, func() error {
		if w.Stats().Total().Completed < n {
			return errors.New("queue not drained")
		}
		return nil
	})
	runtime.ReadMemStats(&after)
	if err := w.Stop(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	perTask := float64(after.Mallocs-before.Mallocs) / n
	t.Logf("%.1f allocations and %.0f bytes per task (worker and server)", perTask, float64(after.TotalAlloc-before.TotalAlloc)/n)
	if perTask > maxAllocsPerTask {
		t.Fatalf("%.1f allocations per plain task, want at most %d", perTask, maxAllocsPerTask)
	}
}
