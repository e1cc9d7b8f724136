package dlqrouter_test

import (
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/spoolq/spool/consumer/dlqrouter"
	spool "github.com/spoolq/spool/shared"
	"github.com/spoolq/spool/streams"
	"github.com/spoolq/spool/streams/streamstest"
)

func TestRouterDropsBadAdvisories(t *testing.T) {
	t.Parallel()
	e := newRouterEnv(t)
	r := e.startRouter(t)
	seq := e.publishTask(t, "spool.tasks.low.cleanup", nil, []byte("x"))
	e.publishRawAdvisory(t, []byte("not json"))
	e.publishRawAdvisory(t, []byte(`{"type":"io.nats.jetstream.advisory.v1.max_deliver","stream":"SPOOL_TASKS"}`)) // no stream_seq
	e.publishRawAdvisory(t, []byte(`{"type":"io.nats.jetstream.advisory.v1.max_deliver","stream":"OTHER","stream_seq":1}`))
	e.publishAdvisory(t, seq, 3) // a good one after the bad ones is still handled

	routerWaitFor(t, 10*time.Second, "all advisories handled", func() (bool, string) {
		idle, state := e.routerIdle(t)
		st := r.Stats()
		return idle && st.Bad == 3 && st.Routed == 1, fmt.Sprintf("%s, stats %+v", state, st)
	})
	dead := e.streamMsgs(t, e.names.DLQStream())
	if len(dead) != 1 || dead[0].Subject != "spool.dlq.low.cleanup" || dead[0].Header.Get(spool.HeaderAttempts) != "3" {
		t.Fatalf("dead letters = %v, want the cleanup task with 3 attempts", dead)
	}
	// Without Spool-Task-Id or Nats-Msg-Id the id is the sequence, and the
	// dead letter carries it.
	if got, want := dead[0].Header.Get(spool.HeaderTaskID), strconv.FormatUint(seq, 10); got != want {
		t.Errorf("dead letter Spool-Task-Id = %q, want %q", got, want)
	}
}

func TestRouterLeavesSchedulesAlone(t *testing.T) {
	t.Parallel()
	e := newRouterEnv(t)
	ctx := routerCtx(t)
	r := e.startRouter(t)
	h := nats.Header{}
	h.Set(spool.HeaderSchedule, spool.FormatScheduleAt(time.Now().Add(time.Hour)))
	h.Set(spool.HeaderScheduleTarget, "spool.tasks.normal.later")
	seq := e.publishTask(t, "spool.sched.later-1", h, []byte("later"))
	e.publishAdvisory(t, seq, 2)

	routerWaitFor(t, 10*time.Second, "the advisory dropped", func() (bool, string) {
		idle, state := e.routerIdle(t)
		return idle && r.Stats().Bad == 1, fmt.Sprintf("%s, stats %+v", state, r.Stats())
	})
	tasks, err := e.js.Stream(ctx, e.names.TaskStream())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tasks.GetMsg(ctx, seq); err != nil {
		t.Errorf("the pending schedule was removed: %v", err)
	}
	if n := e.msgCount(t, e.names.DLQStream()); n != 0 {
		t.Errorf("%d dead letters, want none", n)
	}
}

func TestRouterRetriesTransientFailures(t *testing.T) {
	t.Parallel()
	e := newRouterEnv(t)
	ctx := routerCtx(t)
	// Without the DLQ stream the publish fails: the advisory must be
	// retried, not lost, and the task must stay.
	if err := e.js.DeleteStream(ctx, e.names.DLQStream()); err != nil {
		t.Fatal(err)
	}
	h := nats.Header{}
	h.Set(spool.HeaderTaskID, "retry-1")
	seq := e.publishTask(t, "spool.tasks.critical.pay", h, []byte("pay"))
	r := e.startRouter(t, dlqrouter.WithTimeout(time.Second))
	e.publishAdvisory(t, seq, 2)

	routerWaitFor(t, 10*time.Second, "failed attempts", func() (bool, string) {
		return r.Stats().Failed >= 2, fmt.Sprintf("stats %+v", r.Stats())
	})
	tasks, err := e.js.Stream(ctx, e.names.TaskStream())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tasks.GetMsg(ctx, seq); err != nil {
		t.Fatalf("task lost while the DLQ was missing: %v", err)
	}

	if err := streams.Provision(ctx, e.js, e.topo, streamstest.Logger(t)); err != nil {
		t.Fatal(err)
	}
	routerWaitFor(t, 15*time.Second, "the task dead-lettered once the DLQ is back", func() (bool, string) {
		idle, state := e.routerIdle(t)
		return idle && r.Stats().Routed == 1, fmt.Sprintf("%s, stats %+v", state, r.Stats())
	})
	if dead := e.streamMsgs(t, e.names.DLQStream()); len(dead) != 1 || dead[0].Header.Get(spool.HeaderTaskID) != "retry-1" {
		t.Errorf("dead letters = %v, want retry-1 once", dead)
	}
}
