package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	spool "github.com/spoolq/spool/shared"
)

// putDoc writes a result document as a worker would.
func (k *Kit) putDoc(ctx context.Context, r spool.Result) error {
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	kv, err := k.js.KeyValue(ctx, k.names.ResultsBucket())
	if err != nil {
		return err
	}
	_, err = kv.Put(ctx, r.ID, b)
	return err
}

// workerDoc is a document of id in state st as a worker writes it.
func workerDoc(id string, st spool.State) spool.Result {
	now := time.Now().UTC()
	r := spool.Result{ID: id, Type: TypeEcho, Priority: spool.Normal, State: st, Attempts: 1, EnqueuedAt: now, Worker: "conformance-kit"}
	switch st {
	case spool.StateCompleted:
		r.Result, r.FinishedAt = json.RawMessage(`{"done":true}`), &now
	case spool.StateDead:
		r.Error, r.Reason, r.FinishedAt = "it broke", spool.ReasonPermanent, &now
	}
	return r
}

// askResult asks for id's document and decodes it.
func (k *Kit) askResult(ctx context.Context, op, id string, extra map[string]any) (spool.Result, Answer, error) {
	req := map[string]any{"op": op, "id": id}
	for name, v := range extra {
		req[name] = v
	}
	var r spool.Result
	a, err := k.driver.ask(ctx, req)
	if err != nil {
		return r, a, err
	}
	if a.OK && len(a.Result) > 0 {
		if err := json.Unmarshal(a.Result, &r); err != nil {
			return r, a, fmt.Errorf("%s answer's result is not a result document: %w", op, err)
		}
	}
	return r, a, nil
}

func caseResult(ctx context.Context, k *Kit) error {
	id := k.id("p-result")
	if err := k.putDoc(ctx, workerDoc(id, spool.StateCompleted)); err != nil {
		return err
	}
	r, a, err := k.askResult(ctx, "result", id, nil)
	if err != nil {
		return err
	}
	if !a.OK || !a.Found || r.State != spool.StateCompleted || !sameJSON(r.Result, []byte(`{"done":true}`)) {
		return fmt.Errorf("result of a completed task: %+v, want found, completed with its result", a)
	}
	_, a, err = k.askResult(ctx, "result", k.id("p-unknown"), nil)
	if err != nil {
		return err
	}
	if !a.OK || a.Found {
		return fmt.Errorf("result of an unknown task: %+v, want ok and not found", a)
	}
	return nil
}

func caseWait(ctx context.Context, k *Kit) error {
	id := k.id("p-wait")
	if err := k.putDoc(ctx, workerDoc(id, spool.StateProcessing)); err != nil {
		return err
	}
	written := make(chan error, 1)
	go func() {
		t := time.NewTimer(700 * time.Millisecond)
		defer t.Stop()
		select {
		case <-t.C:
			written <- k.putDoc(ctx, workerDoc(id, spool.StateCompleted))
		case <-ctx.Done():
			written <- ctx.Err()
		}
	}()
	r, a, err := k.askResult(ctx, "wait", id, map[string]any{"timeout": "10s"})
	if werr := <-written; werr != nil {
		return werr
	}
	if err != nil {
		return err
	}
	if !a.OK || r.State != spool.StateCompleted {
		return fmt.Errorf("wait answered %+v, want the completed document written 700ms after it began", a)
	}
	return nil
}

func caseResultDiscarded(ctx context.Context, k *Kit) error {
	id := k.id("p-discarded")
	if err := k.putDoc(ctx, workerDoc(id, spool.StateProcessing)); err != nil {
		return err
	}
	m := nats.NewMsg(k.names.ResultSubject(id))
	spool.SetDiscardedMarker(m.Header)
	if _, err := k.js.PublishMsg(ctx, m); err != nil {
		return fmt.Errorf("writing the discarded marker: %w", err)
	}
	for _, op := range []string{"result", "wait"} {
		_, a, err := k.askResult(ctx, op, id, map[string]any{"timeout": "5s"})
		if err != nil {
			return err
		}
		if a.OK || a.Code != "result_discarded" {
			return fmt.Errorf("%s of a task whose result was discarded answered ok=%v code %q, want code result_discarded", op, a.OK, a.Code)
		}
	}
	return nil
}

func caseReadDead(ctx context.Context, k *Kit) error {
	id := k.id("p-dead")
	if err := k.putDoc(ctx, workerDoc(id, spool.StateDead)); err != nil {
		return err
	}
	r, a, err := k.askResult(ctx, "wait", id, map[string]any{"timeout": "5s"})
	if err != nil {
		return err
	}
	if !a.OK || r.State != spool.StateDead || r.Reason != spool.ReasonPermanent || r.Error != "it broke" {
		return fmt.Errorf("wait for a dead task answered %+v, want dead with its reason and error", a)
	}
	return nil
}

// checkCancelled checks the cancellation and the cancelled document of id.
func (k *Kit) checkCancelled(ctx context.Context, id string) error {
	kv, err := k.js.KeyValue(ctx, k.names.CancelBucket())
	if err != nil {
		return err
	}
	e, err := kv.Get(ctx, id)
	if err != nil {
		return fmt.Errorf("no cancellation of %s stored: %w", id, err)
	}
	var cn spool.Cancellation
	if err := json.Unmarshal(e.Value(), &cn); err != nil || cn.ID != id || cn.By != "conformance-kit" {
		return fmt.Errorf("cancellation %s: want id %s and by conformance-kit (%v)", e.Value(), id, err)
	}
	r, _, found, err := k.doc(ctx, id)
	if err != nil {
		return err
	}
	if !found || r.State != spool.StateCancelled || r.CancelledBy != "conformance-kit" {
		return fmt.Errorf("result document of %s: state %q cancelled_by %q, want cancelled by conformance-kit", id, r.State, r.CancelledBy)
	}
	return checkDoc(r, id)
}

func (k *Kit) cancel(ctx context.Context, id string) (Answer, error) {
	return k.driver.ask(ctx, map[string]any{"op": "cancel", "id": id, "by": "conformance-kit", "reason": "the case"})
}

func caseCancelQueued(ctx context.Context, k *Kit) error {
	id := k.id("p-cancel")
	if _, err := k.enqueue(ctx, map[string]any{"id": id, "type": TypeUnserved, "priority": "low", "payload": "{}"}); err != nil {
		return err
	}
	a, err := k.cancel(ctx, id)
	if err != nil {
		return err
	}
	if !a.OK {
		return fmt.Errorf("cancel of a queued task refused: %s %s", a.Code, a.Error)
	}
	if err := k.checkCancelled(ctx, id); err != nil {
		return err
	}
	if r, _, _, _ := k.doc(ctx, id); r.Type != TypeUnserved || r.Priority != spool.Low {
		return fmt.Errorf("cancelled document has type %q priority %q, want the task's %s low", r.Type, r.Priority, TypeUnserved)
	}
	a, err = k.cancel(ctx, k.id("p-nothing"))
	if err != nil {
		return err
	}
	if a.OK || a.Code != "not_found" {
		return fmt.Errorf("cancel of an unknown task answered ok=%v code %q, want code not_found", a.OK, a.Code)
	}
	return nil
}

func caseCancelDelayed(ctx context.Context, k *Kit) error {
	id := k.id("p-cancel-delayed")
	if _, err := k.enqueue(ctx, map[string]any{"id": id, "type": TypeEcho, "payload": "{}", "delay": "1h"}); err != nil {
		return err
	}
	if _, err := k.oneTask(ctx, id); err != nil {
		return err
	}
	a, err := k.cancel(ctx, id)
	if err != nil {
		return err
	}
	if !a.OK {
		return fmt.Errorf("cancel of a delayed task refused: %s %s", a.Code, a.Error)
	}
	if msgs, err := k.findTask(ctx, id); err != nil || len(msgs) > 0 {
		return fmt.Errorf("the schedule of the cancelled task %s is still stored (%v)", id, err)
	}
	return k.checkCancelled(ctx, id)
}

func caseCancelFinished(ctx context.Context, k *Kit) error {
	id := k.id("p-finished")
	if err := k.putDoc(ctx, workerDoc(id, spool.StateCompleted)); err != nil {
		return err
	}
	a, err := k.cancel(ctx, id)
	if err != nil {
		return err
	}
	if a.OK || a.Code != "task_finished" {
		return fmt.Errorf("cancel of a completed task answered ok=%v code %q, want code task_finished", a.OK, a.Code)
	}
	if r, _, _, err := k.doc(ctx, id); err != nil || r.State != spool.StateCompleted {
		return fmt.Errorf("the completed document became %q (%v)", r.State, err)
	}
	return nil
}

// caseReplay: a replay republishes the dead letter's task to its original
// subject without the dead-letter headers, marks the document pending and
// deletes the dead letter.
func caseReplay(ctx context.Context, k *Kit) error {
	id := k.id("p-replay")
	target, _ := k.names.TaskSubject(spool.Normal, TypeEcho) // a constant subject
	dlqSubj, _ := k.names.DLQSubject(spool.Normal, TypeEcho)
	m := nats.NewMsg(dlqSubj)
	m.Data = []byte(`{"again":true}`)
	for name, v := range map[string]string{
		spool.HeaderTaskID: id, spool.HeaderReason: string(spool.ReasonError), spool.HeaderError: "it broke",
		spool.HeaderAttempts: "4", spool.HeaderFailedAt: time.Now().UTC().Format(time.RFC3339Nano),
		spool.HeaderOriginalSubject: target, spool.HeaderOriginalSeq: "999", spool.HeaderMsgID: "dlq-" + k.names.TaskStream() + "-999",
		"X-Conformance": "carried",
	} {
		m.Header.Set(name, v)
	}
	ack, err := k.js.PublishMsg(ctx, m)
	if err != nil {
		return fmt.Errorf("storing a dead letter: %w", err)
	}
	dead := workerDoc(id, spool.StateDead)
	if err := k.putDoc(ctx, dead); err != nil {
		return err
	}
	a, err := k.driver.ask(ctx, map[string]any{"op": "replay", "seq": ack.Sequence})
	if err != nil {
		return err
	}
	if !a.OK {
		return fmt.Errorf("replay of dead letter %d refused: %s %s", ack.Sequence, a.Code, a.Error)
	}
	task, err := k.oneTask(ctx, id)
	if err != nil {
		return err
	}
	h := task.Header
	var bad []string
	if task.Subject != target || string(task.Data) != `{"again":true}` {
		bad = append(bad, fmt.Sprintf("stored on %s with %q", task.Subject, task.Data))
	}
	if got, want := h.Get(spool.HeaderMsgID), fmt.Sprintf("replay-%d", ack.Sequence); got != want {
		bad = append(bad, fmt.Sprintf("%s %q, want %q", spool.HeaderMsgID, got, want))
	}
	if h.Get(spool.HeaderReplays) != "1" || h.Get(spool.HeaderReplayedAt) == "" || h.Get("X-Conformance") != "carried" {
		bad = append(bad, fmt.Sprintf("%s %q, %s %q, X-Conformance %q", spool.HeaderReplays, h.Get(spool.HeaderReplays), spool.HeaderReplayedAt, h.Get(spool.HeaderReplayedAt), h.Get("X-Conformance")))
	}
	for _, name := range []string{spool.HeaderReason, spool.HeaderError, spool.HeaderAttempts, spool.HeaderFailedAt, spool.HeaderOriginalSubject, spool.HeaderOriginalSeq} {
		if h.Get(name) != "" {
			bad = append(bad, "carries "+name)
		}
	}
	if len(bad) > 0 {
		return fmt.Errorf("the replayed task: %s", strings.Join(bad, "; "))
	}
	r, err := k.waitState(ctx, id, spool.StatePending)
	if err != nil {
		return err
	}
	if r.Attempts != 0 || r.Replays != 1 {
		return fmt.Errorf("document after the replay: attempts %d replays %d, want 0 and 1", r.Attempts, r.Replays)
	}
	s, err := k.js.Stream(ctx, k.names.DLQStream())
	if err != nil {
		return err
	}
	return poll(ctx, 50*time.Millisecond, func() error {
		_, err := s.GetMsg(ctx, ack.Sequence)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return nil
		}
		if err == nil {
			err = fmt.Errorf("dead letter %d is still stored after its replay", ack.Sequence)
		}
		return err
	})
}
