package producer_test

import (
	"errors"
	"testing"
	"time"

	"github.com/spoolq/spool/producer"
	spool "github.com/spoolq/spool/shared"
	"github.com/spoolq/spool/streams"
	"github.com/spoolq/spool/streams/embedded"
	"github.com/spoolq/spool/streams/streamstest"
)

func TestDelayedTaskFiresAtItsTime(t *testing.T) {
	t.Parallel()
	e := newEnv(t, embedded.Options{}, streams.Settings{Consumers: streams.ConsumersByPriority})
	ctx := ctxFor(t)
	const delay = 1500 * time.Millisecond
	res, err := e.client.Enqueue(ctx, producer.Task{
		Type: "reminder", Priority: new(spool.Low), Payload: []byte("wake up"),
		MaxRetries: new(5), Delay: delay,
	})
	if err != nil {
		t.Fatal(err)
	}
	if !res.Scheduled || res.Subject != "spool.sched."+res.ID || res.ProcessAt.IsZero() {
		t.Fatalf("result %+v", res)
	}
	sched, err := e.tasks.GetMsg(ctx, res.Sequence)
	if err != nil {
		t.Fatal(err)
	}
	if got := sched.Header.Get(spool.HeaderScheduleTarget); got != "spool.tasks.low.reminder" {
		t.Fatalf("schedule target %q", got)
	}
	if got := sched.Header.Get(spool.HeaderSchedule); got != spool.FormatScheduleAt(res.ProcessAt) {
		t.Fatalf("schedule %q", got)
	}

	// Not deliverable before its time.
	if n := e.subjectCount(t, "spool.tasks.low.>"); n != 0 {
		t.Fatalf("%d tasks on the priority subject before the schedule fired", n)
	}
	if m := e.fetchOne(t, spool.Low, 200*time.Millisecond); m != nil {
		t.Fatalf("fetched %s before its time", m.Subject())
	}

	// Deliverable after it, on the target subject with its id intact.
	var fired bool
	streamstest.WaitFor(t, 10*time.Second, func() error {
		if e.subjectCount(t, "spool.tasks.low.>") == 0 {
			return errors.New("not fired yet")
		}
		fired = true
		return nil
	})
	m := e.fetchOne(t, spool.Low, 2*time.Second)
	if !fired || m == nil {
		t.Fatal("fired task not fetched")
	}
	md, err := m.Metadata()
	if err != nil {
		t.Fatal(err)
	}
	if md.Timestamp.Before(res.ProcessAt.Add(-50 * time.Millisecond)) {
		t.Errorf("task stored at %s, before its time %s", md.Timestamp, res.ProcessAt)
	}
	if m.Subject() != "spool.tasks.low.reminder" || string(m.Data()) != "wake up" {
		t.Fatalf("fired %s %q", m.Subject(), m.Data())
	}
	meta, err := spool.DecodeMeta(m.Headers())
	if err != nil || meta.ID != res.ID || meta.MaxRetries == nil || *meta.MaxRetries != 5 {
		t.Fatalf("fired task meta %+v, %v (headers %v)", meta, err, m.Headers())
	}
	if err := m.Ack(); err != nil {
		t.Fatal(err)
	}
	// The schedule fired and the task was acked: nothing left to cancel.
	if _, err := e.client.Cancel(ctx, res.ID); !errors.Is(err, producer.ErrTaskNotFound) {
		t.Fatalf("cancel after firing: %v", err)
	}
}

func TestProcessAtInThePastRunsNow(t *testing.T) {
	t.Parallel()
	e := newEnv(t, embedded.Options{}, streams.Settings{Consumers: streams.ConsumersByPriority})
	ctx := ctxFor(t)
	res, err := e.client.Enqueue(ctx, producer.NewTask("late", nil), producer.ProcessAt(time.Now().Add(-time.Hour)))
	if err != nil {
		t.Fatal(err)
	}
	if res.Scheduled || res.Subject != "spool.tasks.normal.late" || !res.ProcessAt.IsZero() {
		t.Fatalf("result %+v", res)
	}
	if m := e.fetchOne(t, spool.Normal, 2*time.Second); m == nil {
		t.Fatal("task not deliverable at once")
	}
}

func TestCancelScheduledTask(t *testing.T) {
	t.Parallel()
	e := startEnv(t)
	ctx := ctxFor(t)
	res, err := e.client.Enqueue(ctx, producer.NewTask("report", nil),
		producer.ProcessIn(time.Hour), producer.Unique("monthly", time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	// Before any consumer sees it, the result reports the pending schedule.
	r, err := e.client.Result(ctx, res.ID)
	if err != nil || r.State != spool.StateScheduled || r.Type != "report" || r.Priority != spool.Normal ||
		r.NextAttempt == nil || !r.NextAttempt.Equal(res.ProcessAt) {
		t.Fatalf("result of a scheduled task: %+v, %v", r, err)
	}
	c, err := e.client.Cancel(ctx, res.ID, producer.CancelBy("ops"), producer.CancelReason("not this month"))
	if err != nil || c.State != spool.StateCancelled || c.Type != "report" || c.CancelledBy != "ops" {
		t.Fatalf("cancel: %+v, %v", c, err)
	}
	r, err = e.client.Result(ctx, res.ID)
	if err != nil || r.State != spool.StateCancelled || r.CancelledBy != "ops" || r.CancelReason != "not this month" || r.FinishedAt == nil {
		t.Fatalf("result after cancel: %+v, %v", r, err)
	}
	if r, err := e.client.Wait(ctx, res.ID); err != nil || r.State != spool.StateCancelled {
		t.Fatalf("wait after cancel: %+v, %v", r, err)
	}
	if n := e.subjectCount(t, "spool.sched.>"); n != 0 {
		t.Fatalf("%d schedules left", n)
	}
	if holder, held := e.uniqueHolder(t, "monthly"); held {
		t.Fatalf("unique key still held by %s", holder)
	}
	if r, err := e.client.Cancel(ctx, res.ID); !errors.Is(err, producer.ErrTaskFinished) || r.State != spool.StateCancelled {
		t.Fatalf("second cancel: %+v, %v", r, err)
	}
	if _, err := e.client.Cancel(ctx, "never-scheduled"); !errors.Is(err, producer.ErrTaskNotFound) {
		t.Fatalf("cancel of an unknown id: %v", err)
	}
	if _, err := e.client.Cancel(ctx, "bad.id"); !errors.Is(err, producer.ErrInvalidID) {
		t.Fatalf("cancel of a bad id: %v", err)
	}
}

func TestCancelKeepsAUniqueKeyHeldByAnotherTask(t *testing.T) {
	t.Parallel()
	e := startEnv(t)
	ctx := ctxFor(t)
	res, err := e.client.Enqueue(ctx, producer.NewTask("report", nil),
		producer.ProcessIn(time.Hour), producer.Unique("k", time.Second))
	if err != nil {
		t.Fatal(err)
	}
	// The key expires and another task takes it before the cancel.
	var other producer.EnqueueResult
	streamstest.WaitFor(t, 10*time.Second, func() error {
		other, err = e.client.Enqueue(ctx, producer.NewTask("report", nil), producer.Unique("k", time.Hour))
		return err
	})
	if _, err := e.client.Cancel(ctx, res.ID); err != nil {
		t.Fatalf("cancel: %v", err)
	}
	if holder, _ := e.uniqueHolder(t, "k"); holder != other.ID {
		t.Fatalf("key held by %q, want %q", holder, other.ID)
	}
}
