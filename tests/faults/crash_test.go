package faults_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/spoolq/spool/producer"
	"github.com/spoolq/spool/tests/checker"
)

// TestWorkerCrash runs at least 20,000 tasks through spool-faultworker
// processes while one of them is killed with SIGKILL every killEvery and
// replaced. Survivors and replacements must finish every task: nothing lost
// or stuck, every task completed, and every duplicate execution explained
// by a kill.
func TestWorkerCrash(t *testing.T) {
	const (
		workers   = 3
		killEvery = 300 * time.Millisecond
	)
	// The same count under soak, where the tasks run on an R3 cluster
	// with fsync on every node (startQueue) at a tenth of the pace; the
	// kills keep their rate, so the soak's faults grow with its time.
	n := 20_000
	start := time.Now()
	// One server in the bounded run; under soak an R3 cluster with
	// sync_interval: always (startQueue).
	q := startQueue(t, "crash")
	nc := connect(t, q.url, "faults-crash")
	js := provision(t, nc, q.settings)
	chk := checker.New()
	fl := newFleet(t, q.url, chk, "SPOOL_CONCURRENCY=16")
	for range workers {
		fl.start()
	}
	client, err := producer.New(nc, producer.WithTimeout(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(client.Close)
	gen := &loadGen{client: client, chk: chk}
	tasks, values := tasksFor(t, "crash", n)

	// Under soak the tasks are durable (fsync per write on three nodes):
	// give the run five times the time.
	ctx := ctxFor(t, time.Duration(scale(4))*time.Minute)
	produced := make(chan error, 1)
	go func() { produced <- gen.enqueue(ctx, tasks, values, 500, 0) }()

	// The fault schedule: kill a random worker and start a replacement
	// every killEvery until the producer is done and the queue drained.
	fl.killUntilDone(ctx, produced, killEvery, func(ctx context.Context) error { return idle(ctx, js) })
	if fl.kills < 5 {
		t.Errorf("only %d kills during the run; the scenario proves little", fl.kills)
	}
	left := settle(t, ctx, js, time.Minute)
	fl.stopAll(30 * time.Second)

	collect(t, js, chk)
	lines, torn := fl.readLogs()
	t.Logf("%d execution lines, %d torn by SIGKILL, %d workers started", lines, torn, workers+fl.kills)
	r := report(t, "worker crash (SIGKILL)"+q.label, fmt.Sprintf("%d SIGKILL", fl.kills), start, chk, left)
	if len(left) > 0 {
		t.Errorf("no server fault here, yet %d acknowledged tasks were left in the task stream", len(left))
	}
	if r.Tasks != n {
		t.Errorf("%d tasks recorded, want %d", r.Tasks, n)
	}
	if r.Completed != r.Tasks {
		t.Errorf("%d of %d tasks completed; dead: %s", r.Completed, r.Tasks, r.DeadSummary())
	}
	for cause, k := range r.DupCauses {
		if cause != "SIGKILL" {
			t.Logf("%d duplicate executions not explained by a kill: %s", k, cause)
		}
	}
}
