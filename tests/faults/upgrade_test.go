package faults_test

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/spoolq/spool/producer"
	spool "github.com/spoolq/spool/shared"
	"github.com/spoolq/spool/streams"
	"github.com/spoolq/spool/streams/streamstest"
	"github.com/spoolq/spool/tests/checker"
)

// switchedLine is what a worker that pulls by priority logs once the
// deployment it runs on switched to pulling by type.
const switchedLine = "the deployment now pulls by type"

// TestRollingUpgradeToByType upgrades a deployment that pulls by priority
// to pulling by type the documented way while its workers run: tasks
// queued, two spool-faultworker processes pulling by priority (the old
// release's path), then `spool-admin provision` with SPOOL_CONSUMERS=type,
// then two new processes, which read the mode at start and pull by type,
// then the old ones stopped one by one with more tasks enqueued at each
// step. It shows that no task is lost or stuck, and every one completes
// within a deadline once the new workers run; that a task ran twice only
// when an old worker was running it at the switch (its consumer removed,
// a type consumer delivers it again: at-least-once); that each old worker
// logs why it stops pulling, stays up and runs no task enqueued after
// that; and that making a priority consumer again, as an old release or a
// stale script might, is refused by the server beside the type consumers.
func TestRollingUpgradeToByType(t *testing.T) {
	stack := startBinStack(t, "faults-upgrade", 4*time.Minute)
	srv, nc, js, ctx, start := stack.srv, stack.nc, stack.js, stack.ctx, stack.start
	admin := func(env []string, args ...string) []byte { return stack.admin(t, env, args...) }
	admin([]string{"SPOOL_CONSUMERS=priority"}, "provision")

	chk := checker.New()
	chk.ExplainUnfaulted("an old worker's priority consumer removed while it ran the task")
	client, err := producer.New(nc, producer.WithTimeout(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(client.Close)
	en := &fleetEnqueuer{t: t, ctx: ctx, client: client, chk: chk, typeOf: map[string]string{}, prio: map[string]spool.Priority{}}
	for _, p := range spool.Priorities {
		for i := range scale(16) {
			en.add("q", "fault.task", p, i, 150)
		}
	}

	// The old release pulls by priority.
	workerEnv := []string{"SPOOL_CONCURRENCY=4", "SPOOL_FAULT_TYPES=fault.task", "SPOOL_SHUTDOWN_TIMEOUT=5s"}
	old := newFleet(t, srv.url, chk, workerEnv...)
	olds := []*proc{old.start(), old.start()}
	streamstest.WaitFor(t, time.Minute, func() error {
		for _, p := range olds {
			if b, err := os.ReadFile(p.log); err != nil || !strings.Contains(string(b), "q-") {
				return fmt.Errorf("old worker %s has run no task yet (%v)", p.pid, err)
			}
		}
		return nil
	})

	// The upgrade step, while the old workers run tasks.
	admin([]string{"SPOOL_CONSUMERS=type"}, "provision")
	streamstest.WaitFor(t, 30*time.Second, func() error {
		for _, p := range olds {
			if b, err := os.ReadFile(p.stderr); err != nil || !strings.Contains(string(b), switchedLine) {
				return fmt.Errorf("old worker %s has not logged %q (%v)\n%s", p.pid, switchedLine, err, old.tail(p))
			}
		}
		return nil
	})
	// Enqueued once the old workers stopped pulling: none may run them.
	late := func(batch string) {
		for _, p := range spool.Priorities {
			for i := range scale(4) {
				en.add(batch, "fault.task", p, i, 50)
			}
		}
	}
	late("r1")

	// The new release pulls by type.
	fresh := newFleet(t, srv.url, chk, workerEnv...)
	fresh.start()
	fresh.start()
	for _, p := range spool.Priorities {
		waitConsumer(t, js, p, "fault.task")
	}
	newStarted := time.Now()

	// Making a priority consumer again beside the type consumers fails.
	topo, err := streams.New(names, settings(1))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range spool.Priorities {
		_, err := js.CreateConsumer(ctx, names.TaskStream(), topo.ConsumerConfig(p))
		var apiErr *jetstream.APIError
		if !errors.As(err, &apiErr) || apiErr.ErrorCode != 10100 {
			t.Errorf("making priority consumer %s after the switch: %v, want error 10100 (overlapping filters)", names.Consumer(p), err)
		}
	}

	// The old workers stay up, then stop one by one.
	old.checkAlive()
	late("r2")
	for i, p := range olds {
		old.signal(p, syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(30 * time.Second):
			t.Fatalf("old worker %s did not stop within 30s after SIGTERM\n%s", p.pid, old.tail(p))
		}
		if p.waitErr != nil {
			t.Errorf("old worker %s exited with %v\n%s", p.pid, p.waitErr, old.tail(p))
		}
		late(fmt.Sprintf("r%d", i+3))
	}

	// No stall: every task completes within a deadline of the new workers'
	// start, and the task stream is left empty.
	waitTerminal(t, js, en.ids(nil), time.Minute)
	t.Logf("every task finished %s after the new workers started", time.Since(newStarted).Round(time.Millisecond))
	lingering := settle(t, ctx, js, 30*time.Second)
	fresh.checkAlive()
	fresh.stopAll(30 * time.Second)
	collect(t, js, chk)
	oldLines, _ := old.readLogs()
	newLines, _ := fresh.readLogs()
	t.Logf("old workers ran %d executions, new workers %d", oldLines, newLines)

	oldPids := map[string]bool{}
	for _, p := range olds {
		oldPids[p.pid] = true
	}
	for id := range en.typeOf {
		var byOld, byNew int
		for _, e := range chk.Executions(id) {
			if oldPids[e.Worker] {
				byOld++
			} else {
				byNew++
			}
		}
		switch {
		case !strings.HasPrefix(id, "q-") && byOld > 0:
			t.Errorf("task %s, enqueued after the old workers stopped pulling, ran on an old worker", id)
		case byOld > 1 || byNew > 1:
			t.Errorf("task %s ran %d times on old workers and %d on new ones, want at most once on each", id, byOld, byNew)
		}
	}
	r := report(t, "rolling upgrade: priority → type, 2 old + 2 new workers", "switch while running, SIGTERM old workers", start, chk, lingering)
	if r.DeadTotal() > 0 {
		t.Errorf("dead tasks %s, want none", r.DeadSummary())
	}
	if r.Completed != len(en.typeOf) {
		t.Errorf("%d of %d tasks completed", r.Completed, len(en.typeOf))
	}
}
