package faults_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/spoolq/spool/producer"
	spool "github.com/spoolq/spool/shared"
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
