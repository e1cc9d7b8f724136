package faults_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/spoolq/spool/tests/checker"
)

// TestServerRestart stops the single embedded server (sync_interval:
// always) and starts it again on the same store and port, several times,
// while a producer enqueues and fault workers run. Clients reconnect by
// themselves; the producer retries failed enqueues with the same id and
// records only acknowledged ones. Nothing acknowledged may be lost.
func TestServerRestart(t *testing.T) {
	const (
		restartEvery = 1500 * time.Millisecond
		downFor      = 300 * time.Millisecond
	)
	restarts := scale(3)
	n := scale(5_000)
	start := time.Now()
	srv := startServer(t, t.TempDir(), 0, true)
	nc := connect(t, srv.url, "faults-restart")
	js := provision(t, nc, settings(1))
	chk := checker.New()
	chk.ExplainUnfaulted("result write or ack lost in a server restart")
	fl, client := twoWorkers(t, srv.url, nc, chk)
	gen := &loadGen{client: client, chk: chk}
	tasks, values := tasksFor(t, "restart", n)

	ctx := ctxFor(t, 3*time.Minute)
	produced := make(chan error, 1)
	// About 2,000 tasks a second, so the producer runs across the restarts.
	go func() { produced <- gen.enqueue(ctx, tasks, values, 100, 50*time.Millisecond) }()

	// The fault schedule: every restartEvery, stop the server, keep it down
	// for downFor, start it again on the same port and store.
	ticker := time.NewTicker(restartEvery)
	defer ticker.Stop()
	done := 0
	for done < restarts {
		select {
		case <-ctx.Done():
			t.Fatal("deadline before the restarts were done")
		case <-ticker.C:
		}
		srv.stop()
		down := time.NewTimer(downFor)
		select {
		case <-down.C:
		case <-ctx.Done():
			down.Stop()
			t.Fatal("deadline while the server was down")
		}
		srv.start()
		done++
		t.Logf("restart %d done at %s", done, time.Since(start).Round(time.Millisecond))
	}
	select {
	case err := <-produced:
		if err != nil {
			t.Fatalf("enqueueing: %v", err)
		}
		t.Logf("producer done at %s", time.Since(start).Round(time.Millisecond))
	case <-ctx.Done():
		t.Fatal("producer not done before the deadline")
	}
	left := settle(t, ctx, js, 2*time.Minute)
	faults := fmt.Sprintf("%d restarts", done)
	fl.checkAlive()
	fl.stopAll(30 * time.Second)

	collect(t, js, chk)
	fl.readLogs()
	t.Logf("%d enqueues retried after an error", gen.Retries.Load())
	r := report(t, "server restart (SyncAlways)", faults, start, chk, left)
	if r.Tasks != n {
		t.Errorf("%d tasks recorded, want %d", r.Tasks, n)
	}
	if r.Completed != r.Tasks {
		t.Errorf("%d of %d tasks completed; dead: %s", r.Completed, r.Tasks, r.DeadSummary())
	}
}
