package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	spool "github.com/spoolq/spool/shared"
)

// producerCases are the producer level's cases. The producer under test
// is a driver (docs/conformance.md); no worker runs, so every task it
// enqueues stays where it put it.
func producerCases() []Case {
	return []Case{
		{Name: "producer/enqueue", Level: Producer, Section: secTasks, Run: caseEnqueue},
		{Name: "producer/generated-id", Level: Producer, Section: secTasks, Run: caseGeneratedID},
		{Name: "producer/dedup", Level: Producer, Section: secTasks, Run: caseDedup},
		{Name: "producer/task-headers", Level: Producer, Section: secTasks, Run: caseTaskHeaders},
		{Name: "producer/delayed", Level: Producer, Section: secDelayed, Run: caseDelayed},
		{Name: "producer/unique", Level: Producer, Section: secUnique, Run: caseUniqueClaim},
		{Name: "producer/result", Level: Producer, Section: secResults, Run: caseResult},
		{Name: "producer/wait", Level: Producer, Section: secResults, Run: caseWait},
		{Name: "producer/result-discarded", Level: Producer, Section: secDiscarded, Run: caseResultDiscarded},
		{Name: "producer/dead-letter", Level: Producer, Section: secDead, Run: caseReadDead},
		{Name: "producer/dead-letter-replay", Level: Producer, Section: secDead, Run: caseReplay},
		{Name: "producer/cancel-queued", Level: Producer, Section: secCancel, Run: caseCancelQueued},
		{Name: "producer/cancel-delayed", Level: Producer, Section: secCancel, Run: caseCancelDelayed},
		{Name: "producer/cancel-finished", Level: Producer, Section: secCancel, Run: caseCancelFinished},
	}
}

// enqueue asks the driver to enqueue and checks that it said ok.
func (k *Kit) enqueue(ctx context.Context, req map[string]any) (Answer, error) {
	req["op"] = "enqueue"
	a, err := k.driver.ask(ctx, req)
	if err != nil {
		return a, err
	}
	if !a.OK {
		return a, fmt.Errorf("enqueue %v refused: %s %s", req, a.Code, a.Error)
	}
	return a, nil
}

// findTask finds the stored message of task id on the task stream.
func (k *Kit) findTask(ctx context.Context, id string) ([]*jetstream.RawStreamMsg, error) {
	s, err := k.js.Stream(ctx, k.names.TaskStream())
	if err != nil {
		return nil, err
	}
	info, err := s.Info(ctx)
	if err != nil {
		return nil, err
	}
	var out []*jetstream.RawStreamMsg
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && seq > 0; seq++ {
		m, err := s.GetMsg(ctx, seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		if taskIDOf(m) == id {
			out = append(out, m)
		}
	}
	return out, nil
}

// taskIDOf is the task id a worker reads from a stored message.
func taskIDOf(m *jetstream.RawStreamMsg) string {
	if id := m.Header.Get(spool.HeaderTaskID); id != "" {
		return id
	}
	if id := m.Header.Get(spool.HeaderMsgID); id != "" {
		return id
	}
	return strconv.FormatUint(m.Sequence, 10)
}

// oneTask waits for exactly one stored message of id.
func (k *Kit) oneTask(ctx context.Context, id string) (*jetstream.RawStreamMsg, error) {
	var m *jetstream.RawStreamMsg
	return m, poll(ctx, 50*time.Millisecond, func() error {
		msgs, err := k.findTask(ctx, id)
		if err != nil {
			return err
		}
		if len(msgs) != 1 {
			return fmt.Errorf("%d stored messages of task %s, want 1", len(msgs), id)
		}
		m = msgs[0]
		return nil
	})
}

func caseEnqueue(ctx context.Context, k *Kit) error {
	id := k.id("p-enqueue")
	body := `{"to":"ada@example.com"}`
	if _, err := k.enqueue(ctx, map[string]any{"id": id, "type": TypeEcho, "priority": "high", "payload": body}); err != nil {
		return err
	}
	m, err := k.oneTask(ctx, id)
	if err != nil {
		return err
	}
	want, _ := k.names.TaskSubject(spool.High, TypeEcho) // a constant subject
	if m.Subject != want || string(m.Data) != body {
		return fmt.Errorf("stored on %s with body %q, want %s with %q", m.Subject, m.Data, want, body)
	}
	if m.Header.Get(spool.HeaderMsgID) != id {
		return fmt.Errorf("%s %q, want the id %q: a retried publish would store the task twice", spool.HeaderMsgID, m.Header.Get(spool.HeaderMsgID), id)
	}
	return nil
}

func caseGeneratedID(ctx context.Context, k *Kit) error {
	a, err := k.enqueue(ctx, map[string]any{"type": TypeEcho, "payload": "{}"})
	if err != nil {
		return err
	}
	if err := spool.ValidateID(a.ID); err != nil {
		return fmt.Errorf("the answer's id: %w", err)
	}
	m, err := k.oneTask(ctx, a.ID)
	if err != nil {
		return err
	}
	if want, _ := k.names.TaskSubject(spool.Normal, TypeEcho); m.Subject != want {
		return fmt.Errorf("a task without priority stored on %s, want %s", m.Subject, want)
	}
	return nil
}

func caseDedup(ctx context.Context, k *Kit) error {
	id := k.id("p-dedup")
	req := map[string]any{"id": id, "type": TypeEcho, "payload": "{}"}
	if _, err := k.enqueue(ctx, req); err != nil {
		return err
	}
	a, err := k.enqueue(ctx, req)
	if err != nil {
		return err
	}
	if !a.Duplicate {
		return errors.New("the second enqueue of one id did not answer duplicate")
	}
	_, err = k.oneTask(ctx, id)
	return err
}

func caseTaskHeaders(ctx context.Context, k *Kit) error {
	id := k.id("p-headers")
	if _, err := k.enqueue(ctx, map[string]any{"id": id, "type": TypeEcho, "payload": "{}", "max_retries": 2, "timeout": "5s"}); err != nil {
		return err
	}
	m, err := k.oneTask(ctx, id)
	if err != nil {
		return err
	}
	if got := m.Header.Get(spool.HeaderMaxRetries); got != "2" {
		return fmt.Errorf("%s %q, want 2", spool.HeaderMaxRetries, got)
	}
	if d, err := time.ParseDuration(m.Header.Get(spool.HeaderTimeout)); err != nil || d != 5*time.Second {
		return fmt.Errorf("%s %q, want 5s", spool.HeaderTimeout, m.Header.Get(spool.HeaderTimeout))
	}
	return nil
}

func caseDelayed(ctx context.Context, k *Kit) error {
	id := k.id("p-delayed")
	before := time.Now()
	if _, err := k.enqueue(ctx, map[string]any{"id": id, "type": TypeEcho, "payload": "{}", "delay": "2s"}); err != nil {
		return err
	}
	m, err := k.oneTask(ctx, id)
	if err != nil {
		return err
	}
	sched, _ := k.names.SchedSubject(id) // a valid id
	target, _ := k.names.TaskSubject(spool.Normal, TypeEcho)
	at, ok := strings.CutPrefix(m.Header.Get("Nats-Schedule"), "@at ")
	when, perr := time.Parse(time.RFC3339Nano, at)
	switch {
	case m.Subject != sched && m.Subject == target:
		return fmt.Errorf("the delayed task was stored on %s at once, want a schedule on %s", m.Subject, sched)
	case m.Subject != sched:
		return fmt.Errorf("stored on %s, want %s", m.Subject, sched)
	case !ok || perr != nil:
		return fmt.Errorf("Nats-Schedule %q, want @at <RFC 3339>", m.Header.Get("Nats-Schedule"))
	case when.Before(before.Add(time.Second)) || when.After(time.Now().Add(3*time.Second)):
		return fmt.Errorf("scheduled at %s, want about 2s after the enqueue at %s", when, before)
	case m.Header.Get("Nats-Schedule-Target") != target:
		return fmt.Errorf("Nats-Schedule-Target %q, want %s", m.Header.Get("Nats-Schedule-Target"), target)
	case m.Header.Get(spool.HeaderTaskID) != id:
		return fmt.Errorf("%s %q, want %q: the fired task has no other id", spool.HeaderTaskID, m.Header.Get(spool.HeaderTaskID), id)
	}
	// The server fires it onto the task subject, the id kept.
	return poll(ctx, 100*time.Millisecond, func() error {
		msgs, err := k.findTask(ctx, id)
		if err != nil {
			return err
		}
		if len(msgs) != 1 || msgs[0].Subject != target {
			return fmt.Errorf("task %s not yet fired onto %s", id, target)
		}
		return nil
	})
}

func caseUniqueClaim(ctx context.Context, k *Kit) error {
	first, second := k.id("p-unique"), k.id("p-unique")
	key := "conformance:" + first
	if _, err := k.enqueue(ctx, map[string]any{"id": first, "type": TypeEcho, "payload": "{}", "unique_key": key, "unique_ttl": "1h"}); err != nil {
		return err
	}
	a, err := k.driver.ask(ctx, map[string]any{"op": "enqueue", "id": second, "type": TypeEcho, "payload": "{}", "unique_key": key, "unique_ttl": "1h"})
	if err != nil {
		return err
	}
	if a.OK || a.Code != "duplicate_unique" {
		return fmt.Errorf("a second task with a held unique key answered ok=%v code %q, want code duplicate_unique", a.OK, a.Code)
	}
	if holder, err := k.holder(ctx, key); err != nil || holder != first {
		return fmt.Errorf("unique key held by %q (%v), want %s", holder, err, first)
	}
	m, err := k.oneTask(ctx, first)
	if err != nil {
		return err
	}
	if m.Header.Get(spool.HeaderUniqueKey) != key || m.Header.Get(spool.HeaderUniqueTTL) == "" {
		return fmt.Errorf("the task carries %s %q and %s %q", spool.HeaderUniqueKey, m.Header.Get(spool.HeaderUniqueKey), spool.HeaderUniqueTTL, m.Header.Get(spool.HeaderUniqueTTL))
	}
	if msgs, err := k.findTask(ctx, second); err != nil || len(msgs) > 0 {
		return fmt.Errorf("the refused task %s was stored (%v)", second, err)
	}
	return nil
}
