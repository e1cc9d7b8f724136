package dlq

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	spool "github.com/spoolq/spool/shared"
)

// Replayed says what a replay did.
type Replayed struct {
	// Seq is the dead letter's former DLQ sequence.
	Seq    uint64 `json:"seq"`
	TaskID string `json:"task_id"`
	// Subject is the task subject the task was published to.
	Subject string `json:"subject"`
	// StreamSeq is the task's new sequence in the task stream.
	StreamSeq uint64 `json:"stream_seq"`
	// Duplicate is set when the task stream had already stored this replay
	// (a replay retried within the duplicate window).
	Duplicate bool `json:"duplicate,omitempty"`
	// Replays counts the task's replays, this one included.
	Replays int `json:"replays"`
	// ResultWritten is false when the result document had moved on (a
	// worker already picked the task up) and was left alone.
	ResultWritten bool `json:"result_written"`
}

// ReplayMsgID is the Nats-Msg-Id of the replay of dead letter seq.
func ReplayMsgID(seq uint64) string { return "replay-" + strconv.FormatUint(seq, 10) }

// deadHeaders are the headers a dead letter adds to the task's.
var deadHeaders = []string{
	spool.HeaderError, spool.HeaderReason, spool.HeaderAttempts, spool.HeaderFailedAt,
	spool.HeaderOriginalSubject, spool.HeaderOriginalSeq,
}

// replayHeader is the dead letter's header without what the dead-letter
// stream added and without JetStream's Nats-* headers, plus a fresh
// Nats-Msg-Id, the task id and the replay count.
func replayHeader(l Letter, replays int, at time.Time) nats.Header {
	h := nats.Header{}
	for k, v := range l.Header {
		if len(k) >= 5 && strings.EqualFold(k[:5], "nats-") {
			continue
		}
		h[k] = append([]string(nil), v...)
	}
	for _, k := range deadHeaders {
		h.Del(k)
	}
	// A replay is a new enqueue.
	h.Del(spool.HeaderEnqueuedAt)
	h.Set(spool.HeaderMsgID, ReplayMsgID(l.Seq))
	if l.TaskID != "" {
		h.Set(spool.HeaderTaskID, l.TaskID)
	}
	h.Set(spool.HeaderReplays, strconv.Itoa(replays))
	h.Set(spool.HeaderReplayedAt, at.UTC().Format(time.RFC3339Nano))
	return h
}

// Replay sends dead letter seq back to its original task subject with its
// attempts reset, records the replay in the result document, and deletes it
// from the dead-letter stream, in that order: the dead letter is deleted only
// once the task stream has acknowledged the replay.
func (d *DLQ) Replay(ctx context.Context, seq uint64) (Replayed, error) {
	l, err := d.Get(ctx, seq)
	if err != nil {
		return Replayed{}, err
	}
	if _, _, err := d.names.ParseTaskSubject(l.OriginalSubject); err != nil {
		return Replayed{}, fmt.Errorf("%w: dead letter %d: %s %q is not a task subject: %w",
			ErrNotReplayable, seq, spool.HeaderOriginalSubject, l.OriginalSubject, err)
	}
	if l.TaskID == "" {
		return Replayed{}, fmt.Errorf("%w: dead letter %d has neither %s nor %s", ErrNotReplayable, seq, spool.HeaderTaskID, spool.HeaderOriginalSeq)
	}
	kv, err := d.js.KeyValue(ctx, d.names.ResultsBucket())
	if err != nil {
		return Replayed{}, fmt.Errorf("opening KV bucket %q: %w", d.names.ResultsBucket(), err)
	}
	// The result document before the replay: the replay count goes on, and
	// its revision guards the write below against a worker's newer one.
	var prev spool.Result
	var rev uint64
	entry, err := kv.Get(ctx, l.TaskID)
	switch {
	case err == nil:
		rev = entry.Revision()
		if err := json.Unmarshal(entry.Value(), &prev); err != nil {
			prev = spool.Result{} // unreadable: start over
		}
	case errors.Is(err, jetstream.ErrKeyNotFound):
	default:
		return Replayed{}, fmt.Errorf("reading result %q: %w", l.TaskID, err)
	}
	replays := prev.Replays + 1
	if n, err := strconv.Atoi(l.Header.Get(spool.HeaderReplays)); err == nil && n+1 > replays {
		replays = n + 1
	}

	now := d.now().UTC()
	msg := &nats.Msg{Subject: l.OriginalSubject, Header: replayHeader(l, replays, now), Data: l.Data}
	ack, err := d.js.PublishMsg(ctx, msg, jetstream.WithExpectStream(d.names.TaskStream()))
	if err != nil {
		return Replayed{}, fmt.Errorf("replaying dead letter %d to %s: %w", seq, l.OriginalSubject, err)
	}
	out := Replayed{Seq: seq, TaskID: l.TaskID, Subject: l.OriginalSubject, StreamSeq: ack.Sequence, Duplicate: ack.Duplicate, Replays: replays}

	p, typ, _ := d.names.ParseTaskSubject(l.OriginalSubject) // checked above
	doc := spool.Result{
		ID:          l.TaskID,
		Type:        typ,
		Priority:    p,
		State:       spool.StatePending,
		Attempts:    0,
		EnqueuedAt:  now,
		TraceParent: l.Header.Get(spool.HeaderTraceParent),
		Replays:     replays,
		ReplayedAt:  &now,
	}
	b, err := json.Marshal(doc)
	if err != nil {
		return out, fmt.Errorf("encoding result %q: %w", l.TaskID, err)
	}
	if rev > 0 {
		_, err = kv.Update(ctx, l.TaskID, b, rev)
	} else {
		_, err = kv.Create(ctx, l.TaskID, b)
	}
	switch {
	case err == nil:
		out.ResultWritten = true
	case errors.Is(err, jetstream.ErrKeyExists):
		// A worker wrote a newer state first: it stands.
	default:
		return out, fmt.Errorf("writing result %q: %w (dead letter %d kept; the task is queued again)", l.TaskID, err, seq)
	}

	s, err := d.stream(ctx)
	if err != nil {
		return out, err
	}
	if err := s.DeleteMsg(ctx, seq); err != nil && !errors.Is(err, jetstream.ErrMsgNotFound) {
		return out, fmt.Errorf("deleting dead letter %d after its replay: %w", seq, err)
	}
	return out, nil
}
