package faults_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/spoolq/spool/producer"
	spool "github.com/spoolq/spool/shared"
	"github.com/spoolq/spool/shared/limits"
	"github.com/spoolq/spool/streams/streamstest"
	"github.com/spoolq/spool/tests/checker"
)

// The type fleet's task types, and who serves them.
const (
	fleetGoTypes   = "fault.task,fault.limited" // the Go workers (spool-faultworker)
	fleetRemote    = "img.*"                    // spool-consumer's only route
	fleetRaw       = "raw.*"                    // the raw worker
	fleetRemoteWho = "fleet-remote"             // spool-consumer's worker name
	fleetRawWho    = "raw"                      // the raw worker's
	fleetLimit     = 3                          // fault.limited's concurrency limit
)

// TestTypeFleet runs, on a deployment provisioned by the released
// spool-admin to pull by type (SPOOL_CONSUMERS=type), a fleet of processes
// that serve different task types: two spool-faultworker processes
// (consumer.Worker) serving fault.task and fault.limited, the released
// spool-consumer whose only handler is the remote route img.*, answered by
// a handler in this test, and a raw worker written from docs/contract.md
// (rawworker_test.go) serving raw.*. It shows that switching removes the
// priority consumers; that a priority pause holds on every type consumer,
// including those made after it; that a type no process serves waits,
// listed as unserved by `spool-admin status`, and runs once a process
// serving it starts; that SIGKILL of a Go worker (its tasks go to the other
// one) and of spool-consumer (restarted) loses nothing; that every task ran
// only on processes serving its type and none was dead-lettered; and that
// fault.limited never ran more than its limit at once.
func TestTypeFleet(t *testing.T) {
	stack := startBinStack(t, "faults-typefleet", 4*time.Minute)
	srv, nc, js, ctx, start := stack.srv, stack.nc, stack.js, stack.ctx, stack.start
	admin := func(env []string, args ...string) []byte { return stack.admin(t, env, args...) }

	// A deployment that pulled by priority, switched to pulling by type.
	admin([]string{"SPOOL_CONSUMERS=priority"}, "provision")
	admin([]string{"SPOOL_CONSUMERS=type"}, "provision")
	tasksStream, err := js.Stream(ctx, names.TaskStream())
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range spool.Priorities {
		if _, err := tasksStream.Consumer(ctx, names.Consumer(p)); !errors.Is(err, jetstream.ErrConsumerNotFound) {
			t.Errorf("after provisioning with SPOOL_CONSUMERS=type, priority consumer %s: %v, want it removed", names.Consumer(p), err)
		}
	}

	store, err := limits.Open(ctx, js, names)
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Put(ctx, limits.Rule{Type: "fault.limited", Concurrency: fleetLimit}); err != nil {
		t.Fatal(err)
	}
	chk := checker.New()
	spanLog := filepath.Join(t.TempDir(), "spans.log")
	goFleet := newFleet(t, srv.url, chk, "SPOOL_CONCURRENCY=12", "SPOOL_FAULT_TYPES="+fleetGoTypes, "SPOOL_FAULT_SPAN_LOG="+spanLog)
	goA, goB := goFleet.start(), goFleet.start()
	for _, pattern := range strings.Split(fleetGoTypes, ",") {
		waitConsumer(t, js, spool.Idle, pattern)
	}

	// Pause low for every consumer of it, then start the raw worker: its
	// low consumer is made paused.
	admin(nil, "pause", "low")
	rawCtx, stopRaw := context.WithCancel(ctx)
	raw := &rawWorker{nc: connect(t, srv.url, "faults-raw-worker"), prefix: names.Prefix(), pattern: fleetRaw, name: fleetRawWho,
		run: func(ctx context.Context, id, _ string, payload []byte, delivered int) ([]byte, error) {
			return runFleetTask(ctx, chk, id, fleetRawWho, payload, delivered)
		}}
	if err := raw.start(ctx); err != nil {
		t.Fatalf("starting the raw worker: %v", err)
	}
	raw.serve(rawCtx, func(err error) { t.Errorf("raw worker: %v", err) })
	t.Cleanup(func() { stopRaw(); raw.wait() })
	for _, pattern := range append(strings.Split(fleetGoTypes, ","), fleetRaw) {
		waitPaused(t, js, pattern)
	}

	client, err := producer.New(nc, producer.WithTimeout(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(client.Close)
	en := &fleetEnqueuer{t: t, ctx: ctx, client: client, chk: chk, typeOf: map[string]string{}, prio: map[string]spool.Priority{}}
	for _, p := range spool.Priorities {
		for i := range 3 {
			en.add("p1", "fault.task", p, i, 0)
			en.add("p1", "fault.limited", p, i, 20)
			en.add("p1", "raw.job", p, i, 0)
		}
		for i := range 2 {
			en.add("p1", "img.resize", p, i, 0)
			en.add("p1", "img.thumb", p, i, 0)
		}
	}
	notLow := func(typ ...string) []string {
		return en.ids(func(id string, p spool.Priority) bool {
			return p != spool.Low && slices.Contains(typ, en.typeOf[id])
		})
	}
	waitTerminal(t, js, notLow("fault.task", "fault.limited", "raw.job"), time.Minute)

	// img.* has no process yet: its tasks wait, listed by status.
	st := fleetStatus(t, admin(nil, "status", "--json"))
	if st.Consumers != "type" {
		t.Errorf("status says workers pull by %q, want type", st.Consumers)
	}
	var unserved []string
	for _, u := range st.Unserved {
		unserved = append(unserved, fmt.Sprintf("%s %s %d", u.Priority, u.Type, u.Queued))
	}
	var want []string
	for _, p := range spool.Priorities {
		want = append(want, p.String()+" img.resize 2", p.String()+" img.thumb 2")
	}
	slices.Sort(unserved)
	slices.Sort(want)
	if !slices.Equal(unserved, want) {
		t.Errorf("unserved types %q, want %q", unserved, want)
	}
	lows := en.ids(func(_ string, p spool.Priority) bool { return p == spool.Low })
	if done := terminal(t, js, lows); len(done) > 0 {
		t.Errorf("low is paused, yet tasks %v finished", done)
	}

	// spool-consumer with the remote route img.* starts: its low consumer
	// joins the pause, and the waiting img tasks of the other priorities run.
	remote := &remoteHandler{chk: chk, inFlight: map[string]int{}}
	hnc := connect(t, srv.url, "faults-remote-handler")
	if _, err := hnc.QueueSubscribe("spool.remote.img.>", "fleet-img", remote.handle); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(remote.wait)
	remoteFleet := newFleet(t, srv.url, chk)
	remoteEnv := []string{
		"SPOOL_REMOTE_ROUTES=" + fleetRemote + "=spool.remote.{type}", "SPOOL_WORKER_NAME=" + fleetRemoteWho,
		"SPOOL_CONCURRENCY_MIN=4", "SPOOL_CONCURRENCY_MAX=8", "SPOOL_METRICS_ADDR=off", "SPOOL_STATS_INTERVAL=0",
		"SPOOL_SHUTDOWN_TIMEOUT=5s", "SPOOL_DLQ_ROUTER=false",
	}
	consumerBin := filepath.Join(binDir, "spool-consumer")
	sc := remoteFleet.startBin(consumerBin, remoteEnv...)
	waitPaused(t, js, fleetRemote)
	waitTerminal(t, js, notLow("img.resize", "img.thumb"), time.Minute)
	if st := fleetStatus(t, admin(nil, "status", "--json")); len(st.Unserved) > 0 {
		t.Errorf("unserved types with every type served: %+v", st.Unserved)
	}
	if done := terminal(t, js, lows); len(done) > 0 {
		t.Errorf("low is paused, yet tasks %v finished", done)
	}
	admin(nil, "resume", "low")
	waitTerminal(t, js, en.ids(nil), time.Minute)

	// SIGKILL of a Go worker and of spool-consumer while they run tasks.
	for i := range 24 {
		en.add("p3", "fault.task", spool.Normal, i, 400)
	}
	for i := range 12 {
		en.add("p3", "fault.limited", spool.High, i, 100)
		en.add("p3", "img.resize", spool.High, i, 400)
	}
	for i := range 6 {
		en.add("p3", "raw.job", spool.Normal, i, 50)
	}
	streamstest.WaitFor(t, time.Minute, func() error {
		b, err := os.ReadFile(goA.log)
		if err != nil || !strings.Contains(string(b), "p3-") {
			return fmt.Errorf("Go worker %s has run no task of the last batch yet (%v)", goA.pid, err)
		}
		if n := remote.running("p3-"); n == 0 {
			return errors.New("spool-consumer has sent no request of the last batch yet")
		}
		return nil
	})
	goFleet.kill(goA)
	killedAt := map[string]time.Time{goA.pid: time.Now()}
	remoteFleet.kill(sc)
	chk.Faulted(fleetRemoteWho, "SIGKILL")
	remoteFleet.startBin(consumerBin, remoteEnv...)
	waitTerminal(t, js, en.ids(nil), 2*time.Minute)
	streamstest.WaitFor(t, time.Minute, func() error {
		info, err := tasksStream.Info(ctx)
		if err != nil {
			return err
		}
		if n := info.State.Msgs; n > 0 {
			return fmt.Errorf("%d tasks left in %s", n, names.TaskStream())
		}
		return nil
	})

	goFleet.checkAlive()
	remoteFleet.checkAlive()
	goFleet.stopAll(30 * time.Second)
	remoteFleet.stopAll(30 * time.Second)
	stopRaw()
	raw.wait()
	collect(t, js, chk)
	lines, torn := goFleet.readLogs()
	t.Logf("%d execution lines of the Go workers, %d torn by SIGKILL", lines, torn)

	// Every execution and every result is of a process serving the type.
	servers := map[string][]string{"fault": {goA.pid, goB.pid}, "img": {fleetRemoteWho}, "raw": {fleetRawWho}}
	results, err := js.KeyValue(ctx, names.ResultsBucket())
	if err != nil {
		t.Fatal(err)
	}
	for id, typ := range en.typeOf {
		family, _, _ := strings.Cut(typ, ".")
		for _, e := range chk.Executions(id) {
			if !slices.Contains(servers[family], e.Worker) {
				t.Errorf("task %s of type %s ran on %s, which does not serve it", id, typ, e.Worker)
			}
		}
		doc := resultOf(t, ctx, results, id)
		if !slices.Contains(servers[family], doc.Worker) {
			t.Errorf("task %s of type %s: result written by %q, which does not serve it", id, typ, doc.Worker)
		}
	}
	r := report(t, "type fleet: 2 Go workers, spool-consumer (remote), raw worker", "SIGKILL 1 Go worker, spool-consumer", start, chk, nil)
	if r.DeadTotal() > 0 {
		t.Errorf("dead tasks %s, want none", r.DeadSummary())
	}
	if r.Completed != len(en.typeOf) {
		t.Errorf("%d of %d tasks completed", r.Completed, len(en.typeOf))
	}
	checkFleetLimit(t, spanLog, killedAt)
}
