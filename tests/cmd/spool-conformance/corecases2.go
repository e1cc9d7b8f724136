package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/spoolq/spool/producer"
	spool "github.com/spoolq/spool/shared"
)

// caseHeartbeat: a task running longer than the ack wait is heartbeated
// with +WPI and never delivered again.
func caseHeartbeat(ctx context.Context, k *Kit) error {
	id := k.id("slow")
	ms := int(ackWait.Milliseconds() * 5 / 2)
	seq, err := k.publish(ctx, spool.Normal, TypeSlow, id, payload(map[string]int{"ms": ms}), nil)
	if err != nil {
		return err
	}
	s, err := k.settled(ctx, id, seq, spool.StateCompleted)
	if err != nil {
		return err
	}
	var wpi int
	for _, a := range s.Acks {
		if a.Delivered != 1 {
			return fmt.Errorf("the task was delivered again while it ran (acks: %v)", kinds(s.Acks))
		}
		if a.Kind() == "+WPI" {
			wpi++
		}
	}
	if wpi < 2 {
		return fmt.Errorf("%d +WPI heartbeats over a %dms run with an ack wait of %s, want at least 2", wpi, ms, ackWait)
	}
	if s.Doc.Attempts != 1 {
		return fmt.Errorf("attempts %d, want 1", s.Doc.Attempts)
	}
	return nil
}

// casePullWhatCanStart: with 2 slots, at most 2 handlers run at once, and
// the tasks delivered and not yet settled stay within one more per slot
// (a task whose handler returned may still be settling while its slot
// runs the next one). A worker that pulls the whole backlog fails both.
func casePullWhatCanStart(ctx context.Context, k *Kit) error {
	const n = 6
	subj, err := k.names.TaskSubject(spool.Normal, TypeSlow)
	if err != nil {
		return err
	}
	ids := make([]string, n)
	seqs := make([]uint64, n)
	for i := range ids {
		ids[i] = k.id("slot")
		if seqs[i], err = k.publish(ctx, spool.Normal, TypeSlow, ids[i], payload(map[string]int{"ms": 1200}), nil); err != nil {
			return err
		}
	}
	most := 0
	runs := make([]spool.Result, n)
	err = poll(ctx, 25*time.Millisecond, func() error {
		ci, err := k.consumerFor(ctx, subj)
		if err != nil {
			return err
		}
		// A task whose outcome is written but not yet acked is settled
		// but for the ack. The snapshot after the consumer's state
		// counts at least those written by then.
		recs, _ := k.obs.snapshot()
		most = max(most, ci.NumAckPending-settling(k, recs, ids, seqs))
		for i, id := range ids {
			d, _, found, err := k.doc(ctx, id)
			if err != nil {
				return err
			}
			if !found || d.State != spool.StateCompleted {
				return fmt.Errorf("task %s not completed yet", id)
			}
			runs[i] = d
		}
		return nil
	})
	if err != nil {
		return err
	}
	if most > 2*concurrency {
		return fmt.Errorf("%d tasks delivered and not settled at once on %s, with SPOOL_CONCURRENCY=%d", most, subj, concurrency)
	}
	if over := overlap(runs); over > concurrency {
		return fmt.Errorf("%d handlers ran at once (from started_at to finished_at), with SPOOL_CONCURRENCY=%d", over, concurrency)
	}
	for i, id := range ids {
		if _, err := k.settled(ctx, id, seqs[i], spool.StateCompleted); err != nil {
			return err
		}
	}
	return nil
}

// settling counts the tasks whose final document was written and whose
// ack was not seen yet.
func settling(k *Kit, recs []Record, ids []string, seqs []uint64) int {
	n := 0
	for i, id := range ids {
		done := slices.ContainsFunc(k.obs.docsOf(recs, id), func(d Doc) bool { return d.Result.State == spool.StateCompleted })
		if done && !hasKind(acksOf(recs, k.names.TaskStream(), seqs[i]), "+ACK", 0) {
			n++
		}
	}
	return n
}

// overlap is the most runs that overlap at one time, of those whose
// document has both started_at and finished_at (optional fields).
func overlap(runs []spool.Result) int {
	type edge struct {
		at    time.Time
		delta int
	}
	var edges []edge
	for _, r := range runs {
		if r.StartedAt == nil || r.FinishedAt == nil {
			continue
		}
		edges = append(edges, edge{*r.StartedAt, 1}, edge{*r.FinishedAt, -1})
	}
	// An end before a start at the same time: back to back is no overlap.
	slices.SortFunc(edges, func(a, b edge) int {
		if c := a.at.Compare(b.at); c != 0 {
			return c
		}
		return a.delta - b.delta
	})
	most, now := 0, 0
	for _, e := range edges {
		now += e.delta
		most = max(most, now)
	}
	return most
}

// caseCancelRunning: a cancelled running task ends cancelled at once and
// is terminated, never completed.
func caseCancelRunning(ctx context.Context, k *Kit) error {
	id := k.id("cancel")
	seq, err := k.publish(ctx, spool.Normal, TypeSlow, id, payload(map[string]int{"ms": 25000}), nil)
	if err != nil {
		return err
	}
	if err := k.waitDelivered(ctx, spool.Normal, TypeSlow, seq); err != nil {
		return err
	}
	if _, err := k.prod.Cancel(ctx, id, producer.CancelBy("conformance-kit"), producer.CancelReason("the case cancels it")); err != nil {
		return fmt.Errorf("cancelling %s: %w", id, err)
	}
	at := time.Now()
	tctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	s, err := k.settled(tctx, id, seq, spool.StateCancelled)
	if err != nil {
		return fmt.Errorf("within 5s of the cancel: %w", err)
	}
	if took := time.Since(at); took > 5*time.Second {
		return fmt.Errorf("the task was terminated %s after the cancel, want at once", took)
	}
	if s.Doc.CancelledBy != "conformance-kit" {
		return fmt.Errorf("cancelled_by %q, want conformance-kit", s.Doc.CancelledBy)
	}
	return k.neverCompleted(ctx, id, s.Docs)
}

// caseCancelBeforeStart: a task whose cancellation is stored before it is
// delivered is dropped unrun.
func caseCancelBeforeStart(ctx context.Context, k *Kit) error {
	id := k.id("precancel")
	kv, err := k.js.KeyValue(ctx, k.names.CancelBucket())
	if err != nil {
		return err
	}
	cn, err := json.Marshal(spool.Cancellation{ID: id, By: "conformance-kit", Reason: "before it runs", At: time.Now().UTC()})
	if err != nil {
		return err
	}
	if _, err := kv.Put(ctx, id, cn); err != nil {
		return fmt.Errorf("storing the cancellation: %w", err)
	}
	seq, err := k.publish(ctx, spool.Normal, TypeEcho, id, []byte(`"must not run"`), nil)
	if err != nil {
		return err
	}
	s, err := k.settled(ctx, id, seq, spool.StateCancelled)
	if err != nil {
		return err
	}
	if s.Doc.CancelledBy != "conformance-kit" || s.Doc.CancelReason != "before it runs" {
		return fmt.Errorf("cancelled_by %q cancel_reason %q, want the cancellation's", s.Doc.CancelledBy, s.Doc.CancelReason)
	}
	if len(s.Doc.Result) > 0 {
		return fmt.Errorf("the cancelled document carries a result %s: the handler ran", s.Doc.Result)
	}
	return k.neverCompleted(ctx, id, s.Docs)
}

// neverCompleted fails if a completed document of id was written.
func (k *Kit) neverCompleted(_ context.Context, id string, docs []Doc) error {
	if slices.ContainsFunc(docs, func(d Doc) bool { return d.Result.State == spool.StateCompleted }) {
		return fmt.Errorf("task %s was cancelled but a completed document was written (states: %v)", id, states(docs))
	}
	return nil
}

// waitDelivered waits until the consumer of typ at p delivered the task
// at seq.
func (k *Kit) waitDelivered(ctx context.Context, p spool.Priority, typ string, seq uint64) error {
	subj, err := k.names.TaskSubject(p, typ)
	if err != nil {
		return err
	}
	return poll(ctx, 25*time.Millisecond, func() error {
		ci, err := k.consumerFor(ctx, subj)
		if err != nil {
			return err
		}
		if ci.Delivered.Stream < seq {
			return fmt.Errorf("consumer %s has not delivered stream sequence %d yet", ci.Name, seq)
		}
		return nil
	})
}

// caseCrash: the worker exits on the first attempt; the task is delivered
// again after the ack wait and completes on attempt 2.
func caseCrash(ctx context.Context, k *Kit) error {
	exits := k.worker.Exits()
	_, _, s, err := k.runTask(ctx, spool.Normal, TypeCrash, "crash", payload(map[string]int{"succeed_at": 2}), nil, spool.StateCompleted)
	if err != nil {
		return err
	}
	if k.worker.Exits() == exits {
		return errors.New("the worker did not exit on the first attempt of conformance.crash")
	}
	if s.Doc.Attempts != 2 {
		return fmt.Errorf("attempts %d, want 2", s.Doc.Attempts)
	}
	return wantAttempt(s.Doc.Result, 2)
}

// caseStoredOutcome: a redelivered task whose completed document of this
// very message is stored is acked without running again.
func caseStoredOutcome(ctx context.Context, k *Kit) error {
	if err := k.worker.stop(ctx); err != nil {
		return err
	}
	id := k.id("stored")
	seq, err := k.publish(ctx, spool.Normal, TypeEcho, id, []byte(`"ran again"`), nil)
	restarted := false
	defer func() {
		if !restarted {
			_ = k.worker.start() // the next cases need it; its error shows there
		}
	}()
	if err != nil {
		return err
	}
	// Take the first delivery as a worker that then crashed would.
	m, err := k.pullOne(ctx, spool.Normal, TypeEcho)
	if err != nil {
		return err
	}
	md, err := m.Metadata()
	if err != nil || md.Sequence.Stream != seq {
		return fmt.Errorf("the kit's pull got %v, want stream sequence %d (%v)", md, seq, err)
	}
	now := time.Now().UTC()
	doc := spool.Result{ID: id, Type: TypeEcho, Priority: spool.Normal, State: spool.StateCompleted, Attempts: 1,
		Result: json.RawMessage(`"stored by the kit"`), EnqueuedAt: md.Timestamp.UTC(), StartedAt: &now, FinishedAt: &now, Worker: "conformance-kit"}
	b, err := json.Marshal(doc)
	if err != nil {
		return err
	}
	kv, err := k.js.KeyValue(ctx, k.names.ResultsBucket())
	if err != nil {
		return err
	}
	rev, err := kv.Put(ctx, id, b)
	if err != nil {
		return err
	}
	restarted = true
	if err := k.worker.start(); err != nil {
		return err
	}
	s, err := k.settled(ctx, id, seq, spool.StateCompleted)
	if err != nil {
		return err
	}
	if !hasKind(s.Acks, "+ACK", 2) && !hasKind(s.Acks, "+ACK", 3) {
		return fmt.Errorf("the redelivery was not acked (acks: %v)", kinds(s.Acks))
	}
	_, now2, _, err := k.doc(ctx, id)
	if err != nil {
		return err
	}
	if now2 != rev || string(s.Doc.Result) != `"stored by the kit"` {
		return fmt.Errorf("the stored outcome was replaced (revision %d, was %d; result %s): the task ran again", now2, rev, s.Doc.Result)
	}
	if ev := k.obs.eventsOf(s.Recs, id); slices.Contains(ev, "started") {
		return fmt.Errorf("an attempt started although the outcome was stored (events: %v)", ev)
	}
	return nil
}

// pullOne pulls one task from the consumer of typ at p, on the kit's own
// inbox, as a raw worker does.
func (k *Kit) pullOne(ctx context.Context, p spool.Priority, typ string) (jetstream.Msg, error) {
	subj, err := k.names.TaskSubject(p, typ)
	if err != nil {
		return nil, err
	}
	ci, err := k.consumerFor(ctx, subj)
	if err != nil {
		return nil, err
	}
	c, err := k.js.Consumer(ctx, k.names.TaskStream(), ci.Name)
	if err != nil {
		return nil, err
	}
	batch, err := c.Fetch(1, jetstream.FetchMaxWait(5*time.Second))
	if err != nil {
		return nil, err
	}
	for m := range batch.Messages() {
		return m, nil
	}
	if err := batch.Error(); err != nil {
		return nil, err
	}
	return nil, fmt.Errorf("no task on %s within 5s", ci.Name)
}

// caseUniqueRelease: the unique key of a completed task and of a dead one
// is released.
func caseUniqueRelease(ctx context.Context, k *Kit) error {
	for _, tc := range []struct {
		typ  string
		want spool.State
	}{{TypeEcho, spool.StateCompleted}, {TypeFatal, spool.StateDead}} {
		id := k.id("unique")
		key := "conformance:" + id
		if err := k.claim(ctx, key, id); err != nil {
			return err
		}
		seq, err := k.publish(ctx, spool.Normal, tc.typ, id, []byte(`{}`), header(spool.HeaderUniqueKey, key, spool.HeaderUniqueTTL, "1h"))
		if err != nil {
			return err
		}
		if _, err := k.settled(ctx, id, seq, tc.want); err != nil {
			return err
		}
		if holder, err := k.holder(ctx, key); err != nil || holder != "" {
			return fmt.Errorf("unique key %q of %s task %s still held by %q after it ended (%v)", key, tc.want, id, holder, err)
		}
	}
	return nil
}

// caseUniqueForeign: a key another task holds is not released.
func caseUniqueForeign(ctx context.Context, k *Kit) error {
	id := k.id("foreign")
	key := "conformance:" + id
	if err := k.claim(ctx, key, "another-task"); err != nil {
		return err
	}
	seq, err := k.publish(ctx, spool.Normal, TypeEcho, id, []byte(`{}`), header(spool.HeaderUniqueKey, key, spool.HeaderUniqueTTL, "1h"))
	if err != nil {
		return err
	}
	if _, err := k.settled(ctx, id, seq, spool.StateCompleted); err != nil {
		return err
	}
	if holder, err := k.holder(ctx, key); err != nil || holder != "another-task" {
		return fmt.Errorf("unique key %q held by another-task now holds %q (%v): a worker deletes the key only while it names its own task", key, holder, err)
	}
	return nil
}

// claim creates a unique key for id, as a producer does.
func (k *Kit) claim(ctx context.Context, key, id string) error {
	kv, err := k.js.KeyValue(ctx, k.names.UniqueBucket())
	if err != nil {
		return err
	}
	if _, err := kv.Create(ctx, spool.UniqueKVKey(key), []byte(id), jetstream.KeyTTL(time.Hour)); err != nil {
		return fmt.Errorf("claiming unique key %q: %w", key, err)
	}
	return nil
}

// holder reads which task holds a unique key; empty when none.
func (k *Kit) holder(ctx context.Context, key string) (string, error) {
	kv, err := k.js.KeyValue(ctx, k.names.UniqueBucket())
	if err != nil {
		return "", err
	}
	e, err := kv.Get(ctx, spool.UniqueKVKey(key))
	if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	return string(e.Value()), nil
}
