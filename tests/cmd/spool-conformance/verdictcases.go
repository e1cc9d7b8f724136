package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	spool "github.com/spoolq/spool/shared"
)

// caseRetryAfter: a retry-after verdict NAKs with exactly its delay.
func caseRetryAfter(ctx context.Context, k *Kit) error {
	const after = 700 * time.Millisecond
	_, _, s, err := k.runTask(ctx, spool.Normal, TypeFail, "after", payload(map[string]int{"succeed_at": 2, "retry_after_ms": int(after.Milliseconds())}), nil, spool.StateCompleted)
	if err != nil {
		return err
	}
	if s.Doc.Attempts != 2 {
		return fmt.Errorf("attempts %d, want 2", s.Doc.Attempts)
	}
	j := slices.IndexFunc(s.Acks, func(a Ack) bool { return a.Kind() == "-NAK" && a.Delivered == 1 })
	if j < 0 {
		return fmt.Errorf("no -NAK at delivery 1 (acks: %v)", kinds(s.Acks))
	}
	var delay struct {
		Delay int64 `json:"delay"`
	}
	_, body, _ := strings.Cut(s.Acks[j].Body, " ")
	if err := json.Unmarshal([]byte(body), &delay); err != nil || time.Duration(delay.Delay) != after {
		return fmt.Errorf("-NAK at delivery 1 is %q, want the verdict's delay {\"delay\":%d}", s.Acks[j].Body, after.Nanoseconds())
	}
	return nil
}

// caseDiscardedResult: a task with Spool-Result: discard completes with
// the marker in place of its document, stored before the ack.
func caseDiscardedResult(ctx context.Context, k *Kit) error {
	id := k.id("discard")
	seq, err := k.publish(ctx, spool.Normal, TypeEcho, id, []byte(`{"big":"output"}`), header(spool.HeaderResult, string(spool.DiscardResult)))
	if err != nil {
		return err
	}
	var docs []Doc
	var acks []Ack
	err = k.obs.wait(ctx, func(recs []Record) error {
		docs, acks = k.obs.docsOf(recs, id), acksOf(recs, k.names.TaskStream(), seq)
		if !hasKind(acks, "+ACK", 0) {
			return fmt.Errorf("task %s: no +ACK yet (acks: %v; writes: %v)", id, kinds(acks), states(docs))
		}
		return nil
	})
	if err != nil {
		return err
	}
	ack := acks[slices.IndexFunc(acks, func(a Ack) bool { return a.Kind() == "+ACK" })]
	i := slices.IndexFunc(docs, func(d Doc) bool { return spool.IsDiscardedMarker(d.Header) })
	switch {
	case i < 0:
		return fmt.Errorf("no discarded marker written (writes: %v)", states(docs))
	case docs[i].Idx > ack.Idx:
		return errors.New("the task was acked before its discarded marker was written")
	case slices.ContainsFunc(docs, func(d Doc) bool { return d.Result.State == spool.StateCompleted }):
		return errors.New("a completed document was written for a task whose result is discarded")
	}
	if _, _, found, err := k.doc(ctx, id); err != nil || found {
		return fmt.Errorf("a document of %s is stored (%v), want none", id, err)
	}
	return nil
}

// caseRepeatingSchedule: a task fired by a repeating schedule on
// spool.sched.> is not run: the worker removes the schedule and
// dead-letters the task with bad_input.
func caseRepeatingSchedule(ctx context.Context, k *Kit) error {
	id := k.id("repeating")
	sched, err := k.names.SchedSubject(id)
	if err != nil {
		return err
	}
	target, err := k.names.TaskSubject(spool.Normal, TypeEcho)
	if err != nil {
		return err
	}
	m := nats.NewMsg(sched)
	m.Data = []byte(`"must not run"`)
	m.Header.Set(spool.HeaderSchedule, "@every 1s")
	m.Header.Set(spool.HeaderScheduleTarget, target)
	m.Header.Set(spool.HeaderTaskID, id)
	if _, err := k.js.PublishMsg(ctx, m); err != nil {
		return fmt.Errorf("storing a repeating schedule: %w", err)
	}
	r, err := k.waitState(ctx, id, spool.StateDead)
	if err != nil {
		return err
	}
	if r.Reason != spool.ReasonBadInput {
		return fmt.Errorf("dead with reason %q, want bad_input", r.Reason)
	}
	s, err := k.js.Stream(ctx, k.names.TaskStream())
	if err != nil {
		return err
	}
	return poll(ctx, 100*time.Millisecond, func() error {
		_, err := s.GetLastMsgForSubject(ctx, sched)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return nil
		}
		if err == nil {
			err = fmt.Errorf("the repeating schedule %s is still stored", sched)
		}
		return err
	})
}
