package results

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	spool "github.com/spoolq/spool/shared"
	"github.com/spoolq/spool/shared/jsproto"
	"github.com/spoolq/spool/streams/dlq"
)

// Store writes result documents to the results bucket and releases
// unique keys. The worker uses one; the DLQ router makes its own and calls
// Dead after dlq.Publish. It is safe for concurrent use.
type Store struct {
	js      jetstream.JetStream
	names   spool.Names
	results jetstream.KeyValue
	unique  jetstream.KeyValue
	worker  string
	// quiet: publish no events (SetEvents(false)).
	quiet bool
	// putPrefix is the subject prefix of a put to the results bucket, for
	// writes that do not wait ($KV.<bucket>.).
	putPrefix string
	// evBufs holds event buffers (*[]byte): the connection copies a
	// message as it publishes it, so Event gives its buffer back at once
	// instead of allocating one per attempt.
	evBufs sync.Pool
}

// maxPooledEvent is the largest event buffer kept for reuse.
const maxPooledEvent = 4 << 10

// New binds the results and unique-key buckets of names. worker names the
// writer in every document (host-pid, "dlq-router", ...).
func New(ctx context.Context, js jetstream.JetStream, names spool.Names, worker string) (*Store, error) {
	results, err := js.KeyValue(ctx, names.ResultsBucket())
	if err != nil {
		return nil, fmt.Errorf("binding results bucket %q: %w", names.ResultsBucket(), err)
	}
	unique, err := js.KeyValue(ctx, names.UniqueBucket())
	if err != nil {
		return nil, fmt.Errorf("binding unique bucket %q: %w", names.UniqueBucket(), err)
	}
	return &Store{
		js:        js,
		names:     names,
		results:   results,
		unique:    unique,
		worker:    worker,
		putPrefix: names.ResultSubject(""),
	}, nil
}

// SetEvents sets whether the store publishes task events (default true).
// Call it before the store is used.
func (r *Store) SetEvents(on bool) { r.quiet = !on }

// Subject is the subject a put of the result of task id is published to
// ($KV.<bucket>.<id>), for callers that publish encoded documents
// themselves (the worker's completion pipeline).
func (r *Store) Subject(id string) string { return r.putPrefix + id }

// Put stores doc under doc.ID and waits for the bucket's acknowledgement.
// The worker name is filled in when empty.
func (r *Store) Put(ctx context.Context, doc spool.Result) error {
	b, err := r.encode(&doc)
	if err != nil {
		return err
	}
	if _, err := r.results.Put(ctx, doc.ID, b); err != nil {
		return fmt.Errorf("writing %s result of task %s: %w", doc.State, doc.ID, err)
	}
	r.stateEvent(&doc, b)
	return nil
}

// PutAsync stores doc without waiting for the acknowledgement; failures
// reach the JetStream context's async error handler. Writes from one
// connection are stored in order, so a later Put of the same key wins.
func (r *Store) PutAsync(doc spool.Result) error {
	b, err := r.encode(&doc)
	if err != nil {
		return err
	}
	if _, err := r.js.PublishAsync(r.putPrefix+doc.ID, b); err != nil {
		return fmt.Errorf("writing %s result of task %s: %w", doc.State, doc.ID, err)
	}
	r.stateEvent(&doc, b)
	return nil
}

// eventOf is the event a stored state announces; processing and pending
// announce none (an attempt announces started as it starts).
func eventOf(s spool.State) spool.EventKind {
	switch s {
	case spool.StateRetrying:
		return spool.EventRetrying
	case spool.StateCompleted:
		return spool.EventCompleted
	case spool.StateDead:
		return spool.EventDead
	case spool.StateCancelled:
		return spool.EventCancelled
	case spool.StateSnoozed:
		return spool.EventSnoozed
	}
	return ""
}

func (r *Store) stateEvent(doc *spool.Result, data []byte) {
	if k := eventOf(doc.State); k != "" {
		r.PublishEvent(k, doc, data)
	}
}

// Event publishes the event of kind about doc (filling in the worker name
// when empty).
func (r *Store) Event(kind spool.EventKind, doc *spool.Result) {
	if r.quiet {
		return
	}
	if doc.Worker == "" {
		doc.Worker = r.worker
	}
	// The document is encoded into the event's own buffer: one buffer
	// and no copy for the event a worker publishes as each attempt starts.
	buf := r.EventBuf()
	body, _, err := r.EncodeEvent((*buf)[:0], kind, doc)
	if err != nil {
		r.PutEventBuf(buf, nil)
		return
	}
	_ = r.js.Conn().Publish(r.names.EventSubject(kind, doc.Priority, doc.ID, doc.Type), body) // best effort: events are notifications
	r.PutEventBuf(buf, body)
}

// EventBuf is an encoding buffer from the store's pool, for EncodeEvent;
// give it back with PutEventBuf once what was encoded into it is
// published (the connection copies a message as it publishes it).
func (r *Store) EventBuf() *[]byte {
	buf, _ := r.evBufs.Get().(*[]byte)
	if buf == nil {
		buf = new([]byte)
	}
	return buf
}

// PutEventBuf gives buf back to the pool, keeping used, the slice it
// grew into (nil: unchanged), unless that grew too large to keep.
func (r *Store) PutEventBuf(buf *[]byte, used []byte) {
	if used != nil {
		if cap(used) > maxPooledEvent {
			return
		}
		*buf = used[:0]
	}
	r.evBufs.Put(buf)
}

// EncodeEvent encodes the event of kind about doc, stamped now, appending
// to buf, and fills in the worker name when empty. doc is the document
// alone, encoded once: a subslice of event when the fast encoder could
// encode it (the event embeds the document), so a caller that stores the
// document and announces it later (the completion pipeline) encodes and
// buffers it once.
func (r *Store) EncodeEvent(buf []byte, kind spool.EventKind, doc *spool.Result) (event, docData []byte, err error) {
	if doc.Worker == "" {
		doc.Worker = r.worker
	}
	head := spool.AppendEvent(slices.Grow(buf, 480+len(doc.Result)+len(doc.Error)), kind, time.Now(), nil)
	head = head[:len(head)-1] // AppendEvent closed the object after an empty document
	if body, ok := spool.AppendResult(head, doc); ok {
		return append(body, '}'), body[len(head):], nil
	}
	d, err := r.encode(doc)
	if err != nil {
		return nil, nil, err
	}
	return spool.AppendEvent(buf[:0], kind, time.Now(), d), d, nil
}

// EventMsg is the subject and body of the event of kind about doc,
// encoded as data.
func (r *Store) EventMsg(kind spool.EventKind, doc *spool.Result, data []byte) (string, []byte) {
	return r.names.EventSubject(kind, doc.Priority, doc.ID, doc.Type),
		spool.AppendEvent(make([]byte, 0, len(data)+80), kind, time.Now(), data)
}

// PublishEvent publishes the event of kind about doc, encoded as data, on
// its event subject: a core NATS publish, for whoever listens (lost when
// nobody does, or when the connection is down).
func (r *Store) PublishEvent(kind spool.EventKind, doc *spool.Result, data []byte) {
	if r.quiet {
		return
	}
	subj, body := r.EventMsg(kind, doc, data)
	_ = r.js.Conn().Publish(subj, body) // best effort: events are notifications
}

// PutUnacked publishes doc to the bucket without asking for an
// acknowledgement: the server stores it and sends nothing back, so a lost
// write goes unnoticed. The worker writes the advisory processing state
// this way (writes from one connection are stored in order, so the final
// state, written later and acknowledged, still wins).
func (r *Store) PutUnacked(doc spool.Result) error {
	b, err := r.encode(&doc)
	if err != nil {
		return err
	}
	if err := r.js.Conn().Publish(r.putPrefix+doc.ID, b); err != nil {
		return fmt.Errorf("writing %s result of task %s: %w", doc.State, doc.ID, err)
	}
	return nil
}

// PutUnackedAt is PutUnacked conditional on the key's revision being rev
// (0: no message): a write that lost the race is dropped by the server,
// unnoticed. The worker writes the processing state this way, so it never
// overwrites a cancellation.
func (r *Store) PutUnackedAt(doc spool.Result, rev uint64) error {
	b, err := r.encode(&doc)
	if err != nil {
		return err
	}
	m := &nats.Msg{Subject: r.putPrefix + doc.ID, Data: b, Header: nats.Header{
		jetstream.ExpectedLastSubjSeqHeader: {strconv.FormatUint(rev, 10)},
	}}
	if err := r.js.Conn().PublishMsg(m); err != nil {
		return fmt.Errorf("writing %s result of task %s: %w", doc.State, doc.ID, err)
	}
	return nil
}

func (r *Store) encode(doc *spool.Result) ([]byte, error) {
	return r.Encode(make([]byte, 0, 384+len(doc.Result)+len(doc.Error)), doc)
}

// Encode encodes doc, appending to buf when it can, and fills in the
// worker name when empty.
func (r *Store) Encode(buf []byte, doc *spool.Result) ([]byte, error) {
	if doc.Worker == "" {
		doc.Worker = r.worker
	}
	if b, ok := spool.AppendResult(buf, doc); ok {
		return b, nil
	}
	// A copy, so that doc does not escape to the heap on the fast path.
	cp := *doc
	b, err := json.Marshal(&cp)
	if err != nil {
		return nil, fmt.Errorf("encoding result of task %s: %w", doc.ID, err)
	}
	return b, nil
}

// Get reads the result document of id; the error wraps
// jetstream.ErrKeyNotFound when there is none.
func (r *Store) Get(ctx context.Context, id string) (spool.Result, error) {
	var doc spool.Result
	e, err := r.results.Get(ctx, id)
	if err != nil {
		return doc, fmt.Errorf("reading result of task %s: %w", id, err)
	}
	if err := json.Unmarshal(e.Value(), &doc); err != nil {
		return doc, fmt.Errorf("decoding result of task %s: %w", id, err)
	}
	return doc, nil
}

// GetFromLeader reads the result document of id as the results stream's
// leader has it: a JetStream API message get, not a direct get, which any
// replica answers, a lagging one included (a node catching up after a
// restart). found is false when there is none (or it was deleted).
func (r *Store) GetFromLeader(ctx context.Context, id string) (doc spool.Result, found bool, err error) {
	doc, _, found, err = r.ReadFromLeader(ctx, id)
	return doc, found, err
}

// ReadFromLeader is GetFromLeader with the key's revision: the stream
// sequence of its last message (a delete marker's too), 0 when the key
// never had one. A write conditional on that revision (PutAt) succeeds only
// if nobody wrote the key since.
//
// A document that does not decode (a writer broke the contract, for
// example with NaN) is found, as a document of no state: it is no outcome
// of any attempt and no cancellation, so the worker runs the task and
// writes its own outcome over it, at this revision, instead of failing
// every settling write of the task until its deliveries run out.
func (r *Store) ReadFromLeader(ctx context.Context, id string) (doc spool.Result, rev uint64, found bool, err error) {
	m, found, err := jsproto.GetMsg(ctx, r.js.Conn(), "KV_"+r.names.ResultsBucket(), jsproto.MsgGetRequest{LastBySubj: r.Subject(id)})
	switch {
	case err != nil:
		return doc, 0, false, fmt.Errorf("reading result of task %s: %w", id, err)
	case !found:
		return doc, 0, false, nil
	case len(m.Data) == 0:
		return doc, m.Seq, false, nil // a delete marker
	}
	if err := json.Unmarshal(m.Data, &doc); err != nil {
		return spool.Result{ID: id}, m.Seq, true, nil
	}
	return doc, m.Seq, true, nil
}

// PutAt stores doc under doc.ID only if the key's revision is still rev
// (0: the key has no message at all), and waits for the acknowledgement.
// A write that lost the race fails with an error IsConflict reports. A
// completed doc whose result is discarded (ResultDiscarded) stores the
// marker of a discarded result instead of the document.
func (r *Store) PutAt(ctx context.Context, doc spool.Result, rev uint64) error {
	b, err := r.encode(&doc)
	if err != nil {
		return err
	}
	if doc.ResultDiscarded {
		err = r.putDiscardedAt(ctx, doc.ID, rev)
	} else {
		_, err = r.results.Update(ctx, doc.ID, b, rev)
	}
	if err != nil {
		return fmt.Errorf("writing %s result of task %s over revision %d: %w", doc.State, doc.ID, rev, err)
	}
	r.stateEvent(&doc, b)
	return nil
}

// putDiscardedAt stores the marker of task id's discarded result over
// revision rev.
func (r *Store) putDiscardedAt(ctx context.Context, id string, rev uint64) error {
	m := DiscardedMarker(r.Subject(id), rev)
	_, err := r.js.PublishMsg(ctx, m)
	return err
}

// DiscardedMarker is the marker of a discarded result on subject (the
// task's key in the results bucket), written only over revision rev: a KV
// delete with Spool-Result: discarded and no body.
func DiscardedMarker(subject string, rev uint64) *nats.Msg {
	m := &nats.Msg{Subject: subject, Header: nats.Header{
		jetstream.ExpectedLastSubjSeqHeader: {strconv.FormatUint(rev, 10)},
	}}
	spool.SetDiscardedMarker(m.Header)
	return m
}

// IsConflict reports the error of a conditional write (PutAt, or a
// published write with Nats-Expected-Last-Subject-Sequence) that lost a
// race: another writer changed the key since its revision was read.
func IsConflict(err error) bool {
	return isWrongLastSequence(err) || errors.Is(err, jetstream.ErrKeyRevisionMismatch)
}

// Dead records a task that went to the dead-letter stream: it writes the
// dead result document (waiting for it) and releases the task's unique key.
// Call it after dlq.Publish succeeded and before removing the
// original. The type and priority come from m.Subject when it parses.
func (r *Store) Dead(ctx context.Context, m dlq.Message) error {
	doc := r.DeadDoc(m)
	if err := r.Put(ctx, doc); err != nil {
		return err
	}
	return r.ReleaseUnique(ctx, m.Header.Get(spool.HeaderUniqueKey), doc.ID)
}

// DeadDoc is the dead result document of a task dead-lettered as m.
func (r *Store) DeadDoc(m dlq.Message) spool.Result {
	id := r.names.TaskID(m.Header, m.Stream, m.Seq)
	finished := m.FailedAt
	if finished.IsZero() {
		finished = time.Now()
	}
	doc := spool.Result{
		ID:           id,
		State:        spool.StateDead,
		Attempts:     m.Attempts,
		Error:        m.Err,
		Reason:       m.Reason,
		EnqueuedAt:   m.EnqueuedAt,
		HandedBackAt: m.HandedBackAt,
		FinishedAt:   &finished,
		TraceParent:  m.Header.Get(spool.HeaderTraceParent),
	}
	if !m.StartedAt.IsZero() {
		s := m.StartedAt
		doc.StartedAt = &s
	}
	if p, typ, err := r.names.ParseTaskSubject(m.Subject); err == nil {
		doc.Priority, doc.Type = p, typ
	}
	return doc
}

// ReleaseUnique deletes the unique key key (the Spool-Unique-Key value,
// stored under spool.UniqueKVKey(key)) from the unique bucket if it still
// belongs to task id, so a new task with the same key can be enqueued. A
// key that is gone, expired or taken by another task is left alone. An
// empty key is a no-op.
func (r *Store) ReleaseUnique(ctx context.Context, key, id string) error {
	if key == "" {
		return nil
	}
	kvKey := spool.UniqueKVKey(key)
	e, err := r.unique.Get(ctx, kvKey)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("reading unique key %q of task %s: %w", key, id, err)
	}
	if string(e.Value()) != id {
		return nil
	}
	err = r.unique.Delete(ctx, kvKey, jetstream.LastRevision(e.Revision()))
	if err != nil && !isWrongLastSequence(err) {
		return fmt.Errorf("releasing unique key %q of task %s: %w", key, id, err)
	}
	return nil
}

// isWrongLastSequence reports the error of a conditional write that lost a
// race: another writer changed the key since we read it.
func isWrongLastSequence(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && (apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
		apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant)
}
