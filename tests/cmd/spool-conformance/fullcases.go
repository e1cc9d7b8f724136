package main

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/micro"

	spool "github.com/spoolq/spool/shared"
	"github.com/spoolq/spool/shared/fleet"
	"github.com/spoolq/spool/streams/admin"
)

// fullCases are the cases a full worker adds to the core ones.
func fullCases() []Case {
	return []Case{
		{Name: "full/events", Level: Full, Section: secEvents, Run: caseEvents},
		{Name: "full/snooze", Level: Full, Section: secVerdicts, Run: caseSnooze},
		{Name: "full/type-pause", Level: Full, Section: secPause, Run: caseTypePause},
		{Name: "full/service", Level: Full, Section: secService, Run: caseService},
		{Name: "full/weights", Level: Full, Section: secWork, Run: caseWeights},
		{Name: "full/concurrency-limit", Level: Full, Section: secFlow, Run: caseConcurrencyLimit},
		{Name: "full/rate-limit", Level: Full, Section: secFlow, Run: caseRateLimit},
		{Name: "full/ordered-keys", Level: Full, Section: secOrdered, Run: caseOrderedKeys},
		{Name: "full/workflow", Level: Full, Section: secWorkflows, Run: caseWorkflow},
	}
}

// caseSnooze: a snooze writes snoozed, NAKs with the delay and runs again
// without counting an attempt.
func caseSnooze(ctx context.Context, k *Kit) error {
	_, _, s, err := k.runTask(ctx, spool.Normal, TypeSnooze, "snooze", payload(map[string]int{"ms": 300}), nil, spool.StateCompleted)
	if err != nil {
		return err
	}
	i := slices.IndexFunc(s.Docs, func(d Doc) bool { return d.Result.State == spool.StateSnoozed })
	if i < 0 {
		return fmt.Errorf("no snoozed document (states written: %v)", states(s.Docs))
	}
	if d := s.Docs[i].Result; d.Snoozes != 1 || d.NextAttempt == nil {
		return fmt.Errorf("snoozed document: snoozes %d next_attempt_at %v, want 1 and a time", d.Snoozes, d.NextAttempt)
	}
	if !hasKind(s.Acks, "-NAK", 1) {
		return fmt.Errorf("no -NAK after the snooze (acks: %v)", kinds(s.Acks))
	}
	if s.Doc.Attempts != 1 || s.Doc.Snoozes != 1 {
		return fmt.Errorf("completed with attempts %d snoozes %d, want 1 and 1", s.Doc.Attempts, s.Doc.Snoozes)
	}
	return nil
}

// caseTypePause: a task of a paused type does not run until the type is
// resumed; other types run on.
func caseTypePause(ctx context.Context, k *Kit) error {
	ac, err := admin.New(k.nc, admin.WithLogger(k.logger))
	if err != nil {
		return err
	}
	if _, err := ac.PauseType(ctx, TypeEcho, admin.TypePauseOptions{By: "conformance-kit", Reason: "the case"}); err != nil {
		return fmt.Errorf("pausing %s: %w", TypeEcho, err)
	}
	resumed := false
	defer func() {
		if !resumed {
			_ = ac.ResumeType(context.WithoutCancel(ctx), TypeEcho) // the next cases need the type
		}
	}()
	id := k.id("paused")
	seq, err := k.publish(ctx, spool.Normal, TypeEcho, id, []byte(`{}`), nil)
	if err != nil {
		return err
	}
	other := k.id("other")
	oseq, err := k.publish(ctx, spool.Normal, TypeFail, other, payload(map[string]int{"succeed_at": 1}), nil)
	if err != nil {
		return err
	}
	if _, err := k.settled(ctx, other, oseq, spool.StateCompleted); err != nil {
		return fmt.Errorf("another type while %s is paused: %w", TypeEcho, err)
	}
	if d, _, found, err := k.doc(ctx, id); err != nil || (found && d.State == spool.StateCompleted) {
		return fmt.Errorf("task %s of the paused type %s ran (%v)", id, TypeEcho, err)
	}
	resumed = true
	if err := ac.ResumeType(ctx, TypeEcho); err != nil {
		return fmt.Errorf("resuming %s: %w", TypeEcho, err)
	}
	s, err := k.settledAnyCopy(ctx, id, seq)
	if err != nil {
		return err
	}
	if s.Attempts != 1 {
		return fmt.Errorf("attempts %d after the pause, want 1: a parked task keeps its attempt count", s.Attempts)
	}
	return nil
}

// settledAnyCopy waits for task id to complete, from its first message or
// a copy a worker published again (a park and its move back).
func (k *Kit) settledAnyCopy(ctx context.Context, id string, seq uint64) (spool.Result, error) {
	r, err := k.waitState(ctx, id, spool.StateCompleted)
	if err != nil {
		return r, err
	}
	return r, poll(ctx, 50*time.Millisecond, func() error {
		stored, err := k.taskStored(ctx, seq)
		if err == nil && stored {
			err = fmt.Errorf("task %s completed but its message is still in %s", id, k.names.TaskStream())
		}
		return err
	})
}

// caseService: the worker answers as an instance of the spool-consumer
// micro service, and its stats endpoint answers a stats document.
func caseService(ctx context.Context, k *Kit) error {
	var info micro.Info
	err := poll(ctx, 200*time.Millisecond, func() error {
		msg, err := k.nc.RequestWithContext(ctx, "$SRV.INFO."+fleet.ServiceName, nil)
		if err != nil {
			return fmt.Errorf("$SRV.INFO.%s: %w", fleet.ServiceName, err)
		}
		return json.Unmarshal(msg.Data, &info)
	})
	if err != nil {
		return err
	}
	if info.Metadata["worker"] == "" || info.Metadata["prefix"] != k.names.Prefix() {
		return fmt.Errorf("service metadata %v: want worker and prefix %q", info.Metadata, k.names.Prefix())
	}
	if h := info.Metadata[fleet.MetadataHandlers]; !strings.Contains(h, TypeEcho) {
		return fmt.Errorf("service metadata handlers %q does not list %s", h, TypeEcho)
	}
	i := slices.IndexFunc(info.Endpoints, func(e micro.EndpointInfo) bool { return e.Name == "stats" })
	if i < 0 {
		return fmt.Errorf("service has no stats endpoint (endpoints: %v)", info.Endpoints)
	}
	msg, err := k.nc.RequestWithContext(ctx, info.Endpoints[i].Subject, nil)
	if err != nil {
		return fmt.Errorf("stats endpoint %s: %w", info.Endpoints[i].Subject, err)
	}
	var st fleet.WorkerStats
	if err := json.Unmarshal(msg.Data, &st); err != nil {
		return fmt.Errorf("stats document: %w: %s", err, msg.Data)
	}
	if st.Worker == "" || st.Total.Completed == 0 {
		return fmt.Errorf("stats document names worker %q with %d completed, want a worker that completed tasks", st.Worker, st.Total.Completed)
	}
	return nil
}

// caseEvents: started and completed events, each a JSON event with the
// task's document.
func caseEvents(ctx context.Context, k *Kit) error {
	id, _, _, err := k.runTask(ctx, spool.Low, TypeEcho, "events", []byte(`{}`), nil, spool.StateCompleted)
	if err != nil {
		return err
	}
	return k.obs.wait(ctx, func(recs []Record) error {
		got := k.obs.eventsOf(recs, id)
		if !slices.Contains(got, "started") || !slices.Contains(got, "completed") {
			return fmt.Errorf("events of %s: %v, want started and completed", id, got)
		}
		for _, r := range recs {
			if !strings.HasPrefix(r.Subject, k.names.Prefix()+".events.") || !strings.Contains(r.Subject, "."+id+".") {
				continue
			}
			var ev spool.Event
			if err := json.Unmarshal(r.Data, &ev); err != nil || ev.Task.ID != id || ev.At.IsZero() {
				return fmt.Errorf("event on %s is not an event of %s: %s", r.Subject, id, r.Data)
			}
			if want := k.names.EventSubject(ev.Event, spool.Low, id, TypeEcho); r.Subject != want {
				return fmt.Errorf("event %s published on %s, want %s", ev.Event, r.Subject, want)
			}
		}
		return nil
	})
}

// caseWeights: with a backlog of idle tasks queued first and as many
// critical ones after it, a worker that shares its slots by priority
// weight (or strictly) starts mostly critical tasks first, where one that
// pulls in arrival order would run the idle backlog first. Every idle task
// still completes. The bound is loose (half of the first starts) so that
// the idle tasks started before the critical ones were published, and any
// a worker pulled ahead, cannot fail a worker that weighs priorities.
func caseWeights(ctx context.Context, k *Kit) error {
	const n = 16
	body := payload(map[string]int{"ms": 100})
	var ids []string
	critical := map[string]bool{}
	for _, p := range []spool.Priority{spool.Idle, spool.Critical} {
		for range n {
			id := k.id("weights-" + p.String())
			if _, err := k.publish(ctx, p, TypeSlow, id, body, nil); err != nil {
				return err
			}
			ids = append(ids, id)
			critical[id] = p == spool.Critical
		}
	}
	var runs []spool.Result
	for _, id := range ids {
		r, err := k.waitState(ctx, id, spool.StateCompleted)
		if err != nil {
			return err
		}
		if r.StartedAt == nil {
			return fmt.Errorf("completed document of %s has no started_at", id)
		}
		runs = append(runs, r)
	}
	slices.SortFunc(runs, func(a, b spool.Result) int { return a.StartedAt.Compare(*b.StartedAt) })
	first := 0
	var order []string
	for i, r := range runs {
		if critical[r.ID] {
			order = append(order, "C")
			if i < n {
				first++
			}
		} else {
			order = append(order, "i")
		}
	}
	if first < n/2 {
		return fmt.Errorf("%d of the first %d starts were critical with %d idle tasks queued before %d critical ones (start order %s): the worker does not favour the higher priority",
			first, n, n, n, strings.Join(order, ""))
	}
	return nil
}
