package consumer_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/spoolq/spool/consumer"
	spool "github.com/spoolq/spool/shared"
	"github.com/spoolq/spool/streams"
	"github.com/spoolq/spool/streams/streamstest"
)

// A repeating schedule a producer publishes on a delayed task's subject
// (spool.sched.<id>) fires once at most into a dead letter with reason
// bad_input, its schedule is removed and its task never runs. A periodic
// schedule on spool.cron and a one-shot delayed task run as before.
func TestRepeatingScheduleOnSchedRefused(t *testing.T) {
	t.Parallel()
	e := newEnv(t, streams.Settings{})
	ctx := testCtx(t)
	var repRuns, atRuns, cronRuns atomic.Int64
	mux := consumer.NewMux()
	count := func(n *atomic.Int64) consumer.HandlerFunc {
		return func(ctx context.Context, task *consumer.Task) ([]byte, error) {
			n.Add(1)
			return []byte(`"ok"`), nil
		}
	}
	mux.HandleFunc("rep.task", count(&repRuns))
	mux.HandleFunc("at.task", count(&atRuns))
	mux.HandleFunc("cron.task", count(&cronRuns))
	e.worker(mux)

	schedule := func(subject, pattern, target, id string) {
		t.Helper()
		m := nats.NewMsg(subject)
		m.Header.Set(spool.HeaderSchedule, pattern)
		m.Header.Set(spool.HeaderScheduleTarget, target)
		if id != "" {
			m.Header.Set(spool.HeaderTaskID, id)
		}
		m.Data = []byte(`{}`)
		if _, err := e.js.PublishMsg(ctx, m); err != nil {
			t.Fatalf("publishing the schedule %s: %v", subject, err)
		}
	}
	schedule("spool.cron.tick", "@every 1s", "spool.tasks.high.cron.task", "")
	schedule("spool.sched.rep-1", "@every 1s", "spool.tasks.high.rep.task", "rep-1")
	schedule("spool.sched.at-1", spool.FormatScheduleAt(time.Now().Add(500*time.Millisecond)), "spool.tasks.high.at.task", "at-1")

	tasks, err := e.js.Stream(ctx, e.names.TaskStream())
	if err != nil {
		t.Fatal(err)
	}
	dlq, err := e.js.Stream(ctx, e.names.DLQStream())
	if err != nil {
		t.Fatal(err)
	}
	const dead = "spool.dlq.high.rep.task"
	streamstest.WaitFor(t, 20*time.Second, func() error {
		m, err := dlq.GetLastMsgForSubject(ctx, dead)
		if err != nil {
			return fmt.Errorf("dead letter on %s: %w", dead, err)
		}
		if r := m.Header.Get(spool.HeaderReason); r != string(spool.ReasonBadInput) {
			t.Fatalf("dead letter reason %q, want bad_input", r)
		}
		for _, want := range []string{"repeating schedules on spool.sched are refused", "spool.cron.<name>", "spool.sched.rep-1"} {
			if got := m.Header.Get(spool.HeaderError); !strings.Contains(got, want) {
				t.Fatalf("dead letter error %q does not say %q", got, want)
			}
		}
		return nil
	})
	streamstest.WaitFor(t, 10*time.Second, func() error {
		if _, err := tasks.GetLastMsgForSubject(ctx, "spool.sched.rep-1"); !errors.Is(err, jetstream.ErrMsgNotFound) {
			return fmt.Errorf("the repeating schedule is still there: %v", err)
		}
		return nil
	})
	doc := e.waitResult("rep-1", spool.StateDead, 10*time.Second)
	if doc.Reason != spool.ReasonBadInput {
		t.Errorf("dead document %+v", doc)
	}
	// The periodic schedule keeps firing: two more of its ticks (2s) give
	// a second fire of the removed schedule time to show up.
	after := cronRuns.Load()
	streamstest.WaitFor(t, 20*time.Second, func() error {
		if n := cronRuns.Load(); n < after+2 {
			return fmt.Errorf("periodic task ran %d times, want %d", n, after+2)
		}
		return nil
	})
	if n := atRuns.Load(); n != 1 {
		t.Errorf("the one-shot delayed task ran %d times, want 1", n)
	}
	if n := repRuns.Load(); n != 0 {
		t.Errorf("the task of the repeating schedule ran %d times, want 0", n)
	}
	info, err := dlq.Info(ctx, jetstream.WithSubjectFilter(dead))
	if err != nil {
		t.Fatal(err)
	}
	if n := info.State.Subjects[dead]; n != 1 {
		t.Errorf("%d dead letters on %s, want 1: the schedule fired again", n, dead)
	}
	if _, err := tasks.GetLastMsgForSubject(ctx, "spool.tasks.high.rep.task"); !errors.Is(err, jetstream.ErrMsgNotFound) {
		t.Errorf("a task of the removed schedule is queued: %v", err)
	}
	if _, err := tasks.GetLastMsgForSubject(ctx, "spool.cron.tick"); err != nil {
		t.Errorf("the periodic schedule is gone: %v", err)
	}
}
