package faults_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/spoolq/spool/producer"
	spool "github.com/spoolq/spool/shared"
	"github.com/spoolq/spool/shared/limits"
	"github.com/spoolq/spool/streams"
	"github.com/spoolq/spool/streams/admin"
	"github.com/spoolq/spool/tests/checker"
)

// TestControlsUnderKills issues pauses (of priorities and of the task
// type), resumes and cancels while worker
// processes are killed with SIGKILL and replaced: nothing is lost, every
// task ends completed or cancelled, and a task whose cancel was
// acknowledged never completes afterwards.
func TestControlsUnderKills(t *testing.T) {
	const (
		workers = 3
		every   = 150 * time.Millisecond
	)
	n := scale(600)
	start := time.Now()
	srv := startServer(t, t.TempDir(), 0, soak())
	nc := connect(t, srv.url, "faults-control")
	js := provision(t, nc, settings(1))
	chk := checker.New()
	fl := newFleet(t, srv.url, chk, "SPOOL_CONCURRENCY=8")
	for range workers {
		fl.start()
	}
	client, err := producer.New(nc, producer.WithTimeout(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(client.Close)
	adm, err := admin.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	tasks := make([]producer.Task, n)
	values := make([]string, n)
	for i := range n {
		tasks[i], values[i] = newTask(t, fmt.Sprintf("ctl-%05d", i), spool.Priorities[i%len(spool.Priorities)], faultTask{SleepMS: 100})
	}
	gen := &loadGen{client: client, chk: chk}
	ctx := ctxFor(t, time.Duration(scale(3))*time.Minute)
	produced := make(chan error, 1)
	go func() { produced <- gen.enqueue(ctx, tasks, values, 20, 20*time.Millisecond) }()

	var mu sync.Mutex
	cancelled := map[string]time.Time{} // id → when its cancel was acknowledged
	var paused *spool.Priority
	pauses, notFound, finished := 0, 0, 0
	typePaused, typePauses := false, 0
	ticker := time.NewTicker(every)
	defer ticker.Stop()
	producing := true
	for round := 0; ; round++ {
		select {
		case err := <-produced:
			if err != nil {
				t.Fatalf("enqueueing: %v", err)
			}
			producing = false
			continue
		case <-ctx.Done():
			t.Fatalf("tasks not done before the deadline: %v", idle(context.WithoutCancel(ctx), js))
		case <-ticker.C:
		}
		// Resume the last pause, and for the first rounds pause another
		// priority and cancel a few tasks.
		if paused != nil {
			if err := adm.ResumePriority(ctx, *paused); err != nil {
				t.Fatalf("resuming %s: %v", *paused, err)
			}
			paused = nil
		}
		if typePaused {
			if err := adm.ResumeType(ctx, "fault.task"); err != nil {
				t.Fatalf("resuming type fault.task: %v", err)
			}
			typePaused = false
		}
		if producing || round < 30 {
			pi := rand.IntN(len(spool.Priorities))
			p := spool.Priorities[pi]
			if _, err := adm.PausePriority(ctx, p, time.Now().Add(time.Minute)); err != nil {
				t.Fatalf("pausing %s: %v", p, err)
			}
			paused = &p
			pauses++
			// Every third round pause the task type too: the workers
			// park what they pull of it until the next round resumes it.
			if round%3 == 0 {
				if _, err := adm.PauseType(ctx, "fault.task", admin.TypePauseOptions{By: "faults", Until: time.Now().Add(time.Minute)}); err != nil {
					t.Fatalf("pausing type fault.task: %v", err)
				}
				typePaused = true
				typePauses++
			}
			// Cancel a few tasks, queued or running: up to 3 of at most 12
			// tries, most of them among the last 100 enqueued and of the
			// priority just paused, whose queued tasks do not start
			// meanwhile. (When the workers keep up with the producer, as
			// they do under soak's fsync per write, a task enqueued earlier
			// has most likely finished.)
			for try, hits := 0, 0; try < 12 && hits < 3; try++ {
				i := rand.IntN(n)
				if sent := int(gen.Sent.Load()); try%4 != 3 && sent > 0 {
					i = max(0, sent-1-rand.IntN(min(sent, 100)))
					i += pi - i%len(spool.Priorities)
					if i >= n {
						continue
					}
				}
				id := tasks[i].ID
				_, err := client.Cancel(ctx, id, producer.CancelBy("faults"))
				switch {
				case err == nil:
					hits++
					mu.Lock()
					cancelled[id] = time.Now()
					mu.Unlock()
				case errors.Is(err, producer.ErrTaskNotFound):
					notFound++ // not enqueued yet
				case errors.Is(err, producer.ErrTaskFinished):
					finished++
				default:
					t.Fatalf("cancelling %s: %v", id, err)
				}
			}
		}
		if !producing && paused == nil && !typePaused && idle(ctx, js) == nil && noneParked(ctx, js) == nil {
			break
		}
		if round%2 == 0 {
			running := fl.running()
			fl.kill(running[rand.IntN(len(running))])
			fl.start()
		}
	}
	left := settle(t, ctx, js, time.Minute)
	fl.stopAll(30 * time.Second)
	collect(t, js, chk)
	lines, torn := fl.readLogs()
	t.Logf("%d execution lines, %d torn by SIGKILL, %d workers started", lines, torn, workers+fl.kills)
	r := report(t, "pauses and cancels under SIGKILL", fmt.Sprintf("%d SIGKILL, %d pauses, %d type pauses, %d cancels", fl.kills, pauses, typePauses, len(cancelled)), start, chk, left)
	t.Logf("cancels: %d acknowledged, %d too late (finished), %d before the enqueue", len(cancelled), finished, notFound)
	if len(cancelled) < 5 || fl.kills < 3 || typePauses < 3 {
		t.Errorf("only %d cancels, %d type pauses and %d kills: the scenario proves little", len(cancelled), typePauses, fl.kills)
	}
	if r.Completed+r.Cancelled != r.Tasks {
		t.Errorf("%d completed + %d cancelled of %d tasks; dead: %s", r.Completed, r.Cancelled, r.Tasks, r.DeadSummary())
	}
	if r.Cancelled != len(cancelled) {
		t.Errorf("%d tasks ended cancelled, %d cancels were acknowledged", r.Cancelled, len(cancelled))
	}
	kv, err := js.KeyValue(ctx, names.ResultsBucket())
	if err != nil {
		t.Fatal(err)
	}
	for id := range cancelled {
		doc, err := result(ctx, kv, id)
		if err != nil || doc.State != spool.StateCancelled || doc.CancelledBy != "faults" {
			t.Errorf("task %s, cancelled, ended %+v (%v)", id, doc, err)
		}
	}
}

// noneParked reports an error while tasks are parked (their type paused,
// or being moved back).
func noneParked(ctx context.Context, js jetstream.JetStream) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	s, err := js.Stream(ctx, names.TaskStream())
	if err != nil {
		return err
	}
	info, err := s.Info(ctx, jetstream.WithSubjectFilter(names.ParkedFilter()))
	if err != nil {
		return err
	}
	n := uint64(0)
	for _, c := range info.State.Subjects {
		n += c
	}
	if n > 0 {
		return fmt.Errorf("%d tasks parked", n)
	}
	return nil
}

// holdBucket is the fault worker's bucket of holds: a fault.task with
// Hold runs until the test puts its key there.
const holdBucket = "fault_holds"

// TestControlsCancelEveryPlaceUnderKills cancels, in each round, a task
// in every place it can wait or run while worker processes are killed
// with SIGKILL and replaced: in retry backoff, delayed, parked by a type
// pause, held for its ordered key's turn, in a concurrency limit's waiting
// room, handed back by a rate limit, and running. (Queued tasks of a
// paused priority are cancelled by TestControlsUnderKills.) The tasks
// that take the limit's slot and the key's turn, and the running one,
// hold them until the test lets them go, so each waiting task is seen in
// its place before its cancel however slow the machine. Every cancel is
// acknowledged, every cancelled task ends cancelled and never runs (the
// retried and the running one never run to completion), the holding tasks
// complete once let go, and no key's turn or limit's slot is left stuck:
// a task enqueued behind the cancelled ones on the same limit and key
// completes.
func TestControlsCancelEveryPlaceUnderKills(t *testing.T) {
	rounds := scale(3)
	start := time.Now()
	srv := startServer(t, t.TempDir(), 0, soak())
	nc := connect(t, srv.url, "faults-cancel-places")
	// By priority: a paused type's tasks are parked, which the scenario
	// cancels there; pulling by type they would stay queued.
	s := settings(1)
	s.Consumers = streams.ConsumersByPriority
	js := provision(t, nc, s)
	ctx := ctxFor(t, time.Duration(scale(3))*time.Minute)
	holds, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: holdBucket})
	if err != nil {
		t.Fatal(err)
	}
	store, err := limits.Open(ctx, js, names)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range []limits.Rule{
		{Type: "fault.limited", Concurrency: 1},
		// Each round's key has its own rate: its second task is handed
		// back for an hour, far past the round.
		{Type: "fault.paced", KeyRate: &limits.Rate{Limit: 1, Period: limits.Duration(time.Hour)}},
		{Type: "fault.ordered", Ordered: limits.OrderHold},
	} {
		if err := store.Put(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	chk := checker.New()
	fl := newFleet(t, srv.url, chk, "SPOOL_CONCURRENCY=4", "SPOOL_RETRY_BASE=5s",
		"SPOOL_FAULT_SPAN_LOG="+filepath.Join(t.TempDir(), "spans.log"))
	for range 3 {
		fl.start()
	}
	client, err := producer.New(nc, producer.WithTimeout(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(client.Close)
	adm, err := admin.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	gen := &loadGen{client: client, chk: chk}
	tasks, err := js.Stream(ctx, names.TaskStream())
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(ctx, names.ResultsBucket())
	if err != nil {
		t.Fatal(err)
	}
	enqueue := func(typ, id, key string, payload faultTask, delay time.Duration) {
		t.Helper()
		tk, v := newTask(t, id, spool.Normal, payload)
		tk.Type, tk.Key, tk.Delay = typ, key, delay
		if err := gen.enqueue(ctx, []producer.Task{tk}, []string{v}, 1, 0); err != nil {
			t.Fatalf("enqueueing %s: %v", id, err)
		}
	}
	waitFor := func(what string, cond func() error) {
		t.Helper()
		if err := poll(ctx, time.Minute, 100*time.Millisecond, cond); err != nil {
			t.Fatalf("waiting for %s: %v\n%s", what, err, fl.tails())
		}
	}
	in := func(id string, place streams.Place) func() error {
		return func() error {
			f, err := streams.FindTask(ctx, tasks, names, id)
			if err != nil {
				return err
			}
			if f == nil || f.Place != place {
				return fmt.Errorf("task %s is not %s (%+v)", id, place, f)
			}
			return nil
		}
	}
	gone := func(id string) func() error {
		return func() error {
			f, err := streams.FindTask(ctx, tasks, names, id)
			if err != nil {
				return err
			}
			if f != nil {
				return fmt.Errorf("task %s is still %s on %s", id, f.Place, f.Msg.Subject)
			}
			return nil
		}
	}
	// reach waits until task id's result is in state want, and returns it.
	reach := func(id string, want spool.State) spool.Result {
		t.Helper()
		var doc spool.Result
		waitFor(id+" "+string(want), func() (err error) {
			doc, err = result(ctx, kv, id)
			if err != nil || doc.State != want {
				return fmt.Errorf("task %s is %s, want %s (%v)", id, doc.State, want, err)
			}
			return nil
		})
		return doc
	}
	kill := func(p *proc) {
		fl.kill(p)
		fl.start()
	}
	// worker returns the running worker process of pid, or any running
	// one but those of skip when pid is empty.
	worker := func(pid string, skip ...string) *proc {
		t.Helper()
		var fits []*proc
		for _, p := range fl.running() {
			if p.pid == pid || pid == "" && !slices.Contains(skip, p.pid) {
				fits = append(fits, p)
			}
		}
		if len(fits) == 0 {
			t.Fatalf("no running worker is %q, or other than %v", pid, skip)
		}
		return fits[rand.IntN(len(fits))]
	}
	ran := map[string]bool{} // cancelled tasks that ran before their cancel
	var cancelled []string
	for r := range rounds {
		key := fmt.Sprintf("r%02d", r)
		id := func(what string) string { return "cp-" + key + "-" + what }
		hold := faultTask{Hold: "cp-" + key}
		// The type pause comes first: the workers have heard of it long
		// before the task to park is enqueued, after the holders run.
		if _, err := adm.PauseType(ctx, "fault.echo", admin.TypePauseOptions{By: "faults"}); err != nil {
			t.Fatal(err)
		}
		// The tasks that take a limit's slot, a key's turn and a running
		// place, and hold them until let go; one that spends its key's
		// rate; one delayed far past the round.
		enqueue("fault.limited", id("slot"), "", hold, 0)
		enqueue("fault.ordered", id("turn"), key, hold, 0)
		enqueue("fault.task", id("running"), "", hold, 0)
		ran[id("running")] = true
		enqueue("fault.paced", id("rate"), key, faultTask{}, 0)
		enqueue("fault.task", id("delayed"), "", faultTask{}, time.Hour)
		slot := reach(id("slot"), spool.StateProcessing)
		turn := reach(id("turn"), spool.StateProcessing)
		reach(id("running"), spool.StateProcessing)
		reach(id("rate"), spool.StateCompleted)
		// The tasks that wait behind them.
		enqueue("fault.limited", id("room"), "", faultTask{}, 0)
		enqueue("fault.ordered", id("held"), key, faultTask{}, 0)
		enqueue("fault.paced", id("handback"), key, faultTask{}, 0)
		enqueue("fault.echo", id("parked"), "", faultTask{}, 0)
		waitFor(id("room")+" in the waiting room", in(id("room"), streams.PlaceWaitingRoom))
		waitFor(id("held")+" held", in(id("held"), streams.PlaceHeld))
		waitFor(id("handback")+" handed back", in(id("handback"), streams.PlaceScheduled))
		waitFor(id("delayed")+" delayed", in(id("delayed"), streams.PlaceScheduled))
		waitFor(id("parked")+" parked", in(id("parked"), streams.PlaceParked))
		// In retry backoff, cancelled first: its first attempt fails, the
		// next is 5s away, and would hold if it came before the cancel.
		enqueue("fault.task", id("retry"), "", faultTask{FailAttempts: 1, Hold: hold.Hold}, 0)
		ran[id("retry")] = true
		reach(id("retry"), spool.StateRetrying)
		for _, what := range []string{"retry", "delayed", "parked", "held", "room", "handback", "running"} {
			doc, err := client.Cancel(ctx, id(what), producer.CancelBy("faults"))
			if err != nil {
				t.Fatalf("cancelling %s: %v", id(what), err)
			}
			if doc.State != spool.StateCancelled {
				t.Fatalf("cancelling %s answered %+v", id(what), doc)
			}
			cancelled = append(cancelled, id(what))
			if what == "parked" {
				// While the cancelled tasks wait and run: a worker that
				// holds neither the slot nor the turn, which the tasks
				// still to cancel wait for.
				kill(worker("", slot.Worker, turn.Worker))
			}
		}
		// Cancel deleted the schedules, and ended the running attempt
		// before its hold lets it go.
		for _, what := range []string{"delayed", "handback", "running"} {
			waitFor(id(what)+" gone", gone(id(what)))
		}
		// Then the worker that holds the slot, the one that holds the
		// turn, or any: the limit's lease expires, the turn stays with
		// the holder's task, which runs again.
		kill(worker([]string{slot.Worker, turn.Worker, ""}[r%3]))
		if err := adm.ResumeType(ctx, "fault.echo"); err != nil {
			t.Fatal(err)
		}
		if _, err := holds.Put(ctx, hold.Hold, []byte("go")); err != nil {
			t.Fatal(err)
		}
		// The slot and the turn go on past the cancelled tasks.
		enqueue("fault.limited", id("slot-next"), "", faultTask{}, 0)
		enqueue("fault.ordered", id("turn-next"), key, faultTask{}, 0)
		for _, what := range []string{"slot", "turn", "slot-next", "turn-next"} {
			reach(id(what), spool.StateCompleted)
		}
	}
	// Every place drains: the cancelled tasks are dropped as they come
	// back to a worker.
	waitFor("every place to drain", func() error {
		if err := idle(ctx, js); err != nil {
			return err
		}
		waiting, err := streams.CountWaiting(ctx, tasks, names)
		if err != nil {
			return err
		}
		for place, n := range waiting {
			if n > 0 {
				return fmt.Errorf("%d tasks %s", n, place)
			}
		}
		return nil
	})
	left := settle(t, ctx, js, time.Minute)
	fl.stopAll(30 * time.Second)
	collect(t, js, chk)
	lines, torn := fl.readLogs()
	t.Logf("%d execution lines, %d torn by SIGKILL", lines, torn)
	rep := report(t, "cancel in every place under SIGKILL", fmt.Sprintf("%d SIGKILL, %d cancels", fl.kills, len(cancelled)), start, chk, left)
	if rep.Completed+rep.Cancelled != rep.Tasks || rep.Cancelled != len(cancelled) {
		t.Errorf("%d completed + %d cancelled of %d tasks, %d cancels acknowledged; dead: %s", rep.Completed, rep.Cancelled, rep.Tasks, len(cancelled), rep.DeadSummary())
	}
	for _, id := range cancelled {
		doc, err := result(ctx, kv, id)
		if err != nil || doc.State != spool.StateCancelled || doc.CancelledBy != "faults" {
			t.Errorf("task %s, cancelled, ended %+v (%v)", id, doc, err)
		}
		if n := len(chk.Executions(id)); !ran[id] && n > 0 {
			t.Errorf("task %s ran %d times after its cancel", id, n)
		}
	}
}
