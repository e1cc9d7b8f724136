package consumer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/spoolq/spool/consumer/internal/results"
	spool "github.com/spoolq/spool/shared"
	"github.com/spoolq/spool/shared/jsproto"
	"github.com/spoolq/spool/shared/workflow"
)

// ErrCancelled is the cause of a handler context ended because its task
// was cancelled (context.Cause(ctx) wraps it).
var ErrCancelled = errors.New("task cancelled")

// cancels knows the cancelled task ids and the running attempts, so a
// cancelled task never starts and a running one has its context cancelled
// as soon as the cancellation is published.
//
// It holds one core subscription to every put in the cancel bucket
// ($KV.spool_cancel.>): no JetStream API request, so it rides out leader
// elections. The ids already cancelled are listed once at start and again
// after every reconnect, when puts may have been missed.
type cancels struct {
	kv     jetstream.KeyValue
	prefix string // $KV.<bucket>.
	log    *slog.Logger
	sub    *nats.Subscription

	mu sync.Mutex
	// ids are the cancelled tasks, with their cancellation when it came
	// by the subscription (a listed one is read when needed).
	ids map[string]*spool.Cancellation
	// running lists each task's running attempts (usually one), linked
	// through watch.sameTask: no allocation per attempt.
	running map[string]*watch
}

func newCancels(ctx context.Context, nc *nats.Conn, js jetstream.JetStream, names spool.Names, bind jsproto.Retry, log *slog.Logger) (*cancels, error) {
	var kv jetstream.KeyValue
	err := bind.Do(ctx, "binding the cancel bucket "+names.CancelBucket(), func(ctx context.Context) (err error) {
		kv, err = js.KeyValue(ctx, names.CancelBucket())
		return err
	})
	if err != nil {
		return nil, bindError("KV bucket", names.CancelBucket(), err)
	}
	c := &cancels{
		kv:      kv,
		prefix:  strings.TrimSuffix(names.CancelFilter(), ">"),
		log:     log,
		ids:     make(map[string]*spool.Cancellation),
		running: make(map[string]*watch),
	}
	// Subscribe before listing: a cancellation published meanwhile is
	// seen by one or the other.
	if c.sub, err = nc.Subscribe(names.CancelFilter(), c.onMsg); err != nil {
		return nil, fmt.Errorf("subscribing to cancellations on %q: %w", names.CancelFilter(), err)
	}
	err = bind.Do(ctx, "listing cancelled tasks", c.load)
	if err != nil {
		_ = c.sub.Unsubscribe()
		return nil, err
	}
	return c, nil
}

// load adds every id in the bucket to the cancelled set.
func (c *cancels) load(ctx context.Context) error {
	lister, err := c.kv.ListKeys(ctx)
	if err != nil {
		return fmt.Errorf("listing cancelled tasks: %w", err)
	}
	defer func() { _ = lister.Stop() }()
	n := 0
	for id := range lister.Keys() {
		c.add(id, nil)
		n++
	}
	if ctx.Err() != nil {
		return fmt.Errorf("listing cancelled tasks (%d so far): %w", n, ctx.Err())
	}
	return nil
}

func (c *cancels) onMsg(m *nats.Msg) {
	id, ok := strings.CutPrefix(m.Subject, c.prefix)
	if !ok || id == "" {
		return
	}
	if op := m.Header.Get("KV-Operation"); op == "DEL" || op == "PURGE" {
		c.mu.Lock()
		delete(c.ids, id)
		c.mu.Unlock()
		return
	}
	var doc *spool.Cancellation
	if err := json.Unmarshal(m.Data, &doc); err != nil {
		doc = nil // read from the bucket when needed
	}
	c.add(id, doc)
}

// add marks id cancelled (doc: its cancellation, nil when unknown) and
// cancels its running attempts.
func (c *cancels) add(id string, doc *spool.Cancellation) {
	c.mu.Lock()
	if have := c.ids[id]; doc != nil || have == nil {
		c.ids[id] = doc
	}
	var hs []*watch
	for h := c.running[id]; h != nil; h = h.sameTask {
		hs = append(hs, h)
	}
	c.mu.Unlock()
	for _, h := range hs {
		c.log.Info("cancelling running task", "task_id", id)
		h.cancelTask()
	}
}

func (c *cancels) cancelled(id string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.ids[id]
	return ok
}

// track registers a running attempt; it is cancelled at once when its task
// already is.
func (c *cancels) track(id string, h *watch) {
	c.mu.Lock()
	h.sameTask = c.running[id]
	c.running[id] = h
	_, gone := c.ids[id]
	c.mu.Unlock()
	if gone {
		h.cancelTask()
	}
}

func (c *cancels) untrack(id string, h *watch) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch head := c.running[id]; {
	case head == h && h.sameTask == nil:
		delete(c.running, id)
	case head == h:
		c.running[id] = h.sameTask
	default:
		for prev := head; prev != nil; prev = prev.sameTask {
			if prev.sameTask == h {
				prev.sameTask = h.sameTask
				break
			}
		}
	}
	h.sameTask = nil
}

// get returns the cancellation of id: as it arrived, else read from the
// bucket; a missing or unreadable one gives a document with the id only.
// (The put reaches subscribers as the stream stores it, so a read right
// after the message may not find it yet: the message's copy is kept.)
func (c *cancels) get(ctx context.Context, id string) spool.Cancellation {
	c.mu.Lock()
	have := c.ids[id]
	c.mu.Unlock()
	if have != nil {
		return *have
	}
	doc := spool.Cancellation{ID: id}
	e, err := c.kv.Get(ctx, id)
	if err != nil {
		c.log.Warn("reading cancellation", "task_id", id, "error", err)
		return doc
	}
	if err := json.Unmarshal(e.Value(), &doc); err != nil {
		c.log.Warn("decoding cancellation", "task_id", id, "error", err)
	}
	return doc
}

func (c *cancels) close() {
	if err := c.sub.Unsubscribe(); err != nil && !errors.Is(err, nats.ErrConnectionClosed) {
		c.log.Warn("unsubscribing from cancellations", "error", err)
	}
}

// settleCancelled ends an attempt of a cancelled task: the cancelled
// result document (who and why from the cancellation) unless the
// canceller stored one already, the unique key released, and the task
// terminated: never retried, never dead-lettered.
func (w *Worker) settleCancelled(a attemptInfo, o outcome) {
	ctx, cancel := context.WithTimeout(w.ioCtx, w.o.IOTimeout)
	c := w.cancels.get(ctx, a.id)
	cancel()
	doc := a.doc(spool.StateCancelled)
	fin := time.Now()
	doc.FinishedAt = &fin
	doc.CancelledBy, doc.CancelReason = c.By, c.Reason
	err := w.settleWrite(a, "writing the cancelled state of task "+a.id, func(ctx context.Context) error {
		return w.putCancelled(ctx, a.id, doc)
	})
	if err != nil {
		w.log.Warn("writing cancelled state", "task_id", a.id, "error", err)
	}
	err = w.settleWrite(a, "releasing the unique key of task "+a.id, func(ctx context.Context) error {
		return w.results.ReleaseUnique(ctx, a.uniqueKey, a.id)
	})
	if err != nil {
		w.log.Warn("releasing unique key", "task_id", a.id, "unique_key", a.uniqueKey, "error", err)
	}
	if a.wf != nil {
		// A workflow step that was cancelled on its own (or by
		// Client.CancelWorkflow while it ran) advances its workflow like
		// any other terminal step, before its task is removed.
		msg := "cancelled"
		if c.By != "" {
			msg += " by " + c.By
		}
		if c.Reason != "" {
			msg += ": " + c.Reason
		}
		err := w.settleWrite(a, "advancing the workflow of cancelled task "+a.id, func(context.Context) error {
			return w.finishStep(a, workflow.Outcome{State: workflow.Cancelled, Error: msg})
		})
		if err != nil {
			// Left unacked: the task comes back and is settled again.
			w.log.Warn("advancing the workflow of a cancelled step; the task will come back", "task_id", a.id, "error", err)
			w.rec.record(a.p, a.typ, o)
			return
		}
	}
	if err := w.finishOrder(a); err != nil {
		// Left unacked: the task comes back and is settled again.
		w.log.Warn("passing the turn of a cancelled task; the task will come back", "task_id", a.id, "error", err)
		w.rec.record(a.p, a.typ, o)
		return
	}
	if err := a.msg.TermWithReason(spool.TermCancelled); err != nil {
		w.log.Warn("removing cancelled task", "task_id", a.id, "error", err)
	}
	w.log.Info("task cancelled", "task_id", a.id, "type", a.typ, "priority", a.p.String(), "by", c.By, "reason", c.Reason)
	w.rec.record(a.p, a.typ, o)
}

// putCancelled stores the cancelled document doc unless the task's stored
// document is cancelled already: whoever changes the document to
// cancelled publishes the one cancelled event of the task (the canceller,
// or this worker when it writes first). The write is over the revision
// read, so a canceller writing meanwhile makes it read again.
func (w *Worker) putCancelled(ctx context.Context, id string, doc spool.Result) error {
	for range maxFinalTries {
		cur, rev, found, err := w.results.ReadFromLeader(ctx, id)
		if err != nil {
			return err
		}
		if found && cur.State == spool.StateCancelled {
			if sameFinal(cur, doc) {
				// An earlier try was stored and its answer lost, before
				// its event was published.
				w.results.Event(spool.EventCancelled, &doc)
			}
			return nil
		}
		err = w.results.PutAt(ctx, doc, rev)
		if err == nil || !results.IsConflict(err) {
			return err
		}
	}
	return fmt.Errorf("the result of task %s kept changing (%d writes lost a race)", id, maxFinalTries)
}

// stored reports whether task id has a cancellation in the bucket (read
// from the bucket: the local view may not have heard of it yet).
func (c *cancels) stored(ctx context.Context, id string) (bool, error) {
	if c.cancelled(id) {
		return true, nil
	}
	_, err := c.kv.Get(ctx, id)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, jetstream.ErrKeyNotFound):
		return false, nil
	}
	return false, fmt.Errorf("reading the cancellation of task %s: %w", id, err)
}

// errYield is the outcome of putFinal when the task was cancelled
// meanwhile: the finished document was not written.
var errYield = errors.New("the task was cancelled: its outcome yields")

// maxFinalTries bounds putFinal's compare-and-set loop.
const maxFinalTries = 8

// putFinal stores the finished document of an attempt (completed or dead)
// over the revision of the task's result the attempt knows (a.rev), so
// that it never overwrites a cancellation stored meanwhile: the outcome of
// a task is decided by one writer. On a conflict it reads the document
// and the cancellation again: our own document already stored (an
// earlier try was stored but its answer lost) counts as stored; a task
// cancelled meanwhile (its cancelled document, or its cancellation, which
// Cancel stores before its document) gives errYield, nothing written;
// anything else (our own processing state, a stale document) is written
// over, at the revision read. The document is never recomputed.
//
// conflicted says a write over a.rev lost already (the pipeline's): the
// first step is then the read.
func (w *Worker) putFinal(ctx context.Context, a attemptInfo, doc spool.Result, conflicted bool) error {
	rev := a.rev
	for range maxFinalTries {
		if !conflicted {
			err := w.results.PutAt(ctx, doc, rev)
			if err == nil || !results.IsConflict(err) {
				return err
			}
		}
		conflicted = false
		cur, curRev, found, err := w.results.ReadFromLeader(ctx, a.id)
		if err != nil {
			return err
		}
		if found && sameFinal(cur, doc) {
			return nil
		}
		if found && cur.State == spool.StateCancelled {
			return errYield
		}
		if found && ownProcessing(cur, doc) {
			// This attempt's processing state, written over the revision
			// it read: it replaced no cancellation, so a canceller either
			// has not written yet (and its write over what it read will
			// lose to this one or win over it) or wrote after it.
			rev = curRev
			continue
		}
		cancelled, err := w.cancels.stored(ctx, a.id)
		if err != nil {
			return err
		}
		if cancelled {
			return errYield
		}
		rev = curRev
	}
	return fmt.Errorf("the result of task %s kept changing (%d writes lost a race)", a.id, maxFinalTries)
}

// ownProcessing reports whether stored is the processing state of the
// attempt that finished with doc, as putProcessing writes it (without
// progress: a progress write is unconditional).
func ownProcessing(stored, doc spool.Result) bool {
	return stored.State == spool.StateProcessing && stored.Progress == nil &&
		stored.Attempts == doc.Attempts && stored.EnqueuedAt.Equal(doc.EnqueuedAt)
}

// sameFinal reports whether stored is the finished document doc (written
// by an earlier try of the same write).
func sameFinal(stored, doc spool.Result) bool {
	return stored.State == doc.State && stored.Attempts == doc.Attempts && stored.EnqueuedAt.Equal(doc.EnqueuedAt) &&
		stored.FinishedAt != nil && doc.FinishedAt != nil && stored.FinishedAt.Equal(*doc.FinishedAt)
}

// cancelledNow reports whether a's task has a cancellation stored, read
// from the bucket when the local view has none; a failed read counts as
// none.
func (w *Worker) cancelledNow(a attemptInfo) bool {
	ctx, cancel := context.WithTimeout(w.ioCtx, w.pipe.timeout)
	defer cancel()
	ok, err := w.cancels.stored(ctx, a.id)
	if err != nil {
		w.log.Warn("reading the cancellation of a failing task", "task_id", a.id, "error", err)
	}
	return ok
}

// finishConflicted settles a pipelined completion whose conditional result
// write lost a race (see putFinal): it is written again over the current
// revision and acked, or the task ends cancelled when it was cancelled
// meanwhile.
func (w *Worker) finishConflicted(a attemptInfo, o outcome, doc spool.Result) {
	conflicted := true
	err := w.settleWrite(a, "writing the result of task "+a.id, func(ctx context.Context) error {
		err := w.putFinal(ctx, a, doc, conflicted)
		conflicted = false // a retry through an election writes first
		return err
	})
	switch {
	case errors.Is(err, errYield):
		o.completed = false
		w.settleCancelled(a, o)
	case err != nil:
		w.resultLost(a, o, err)
	default:
		if err := a.msg.Ack(); err != nil {
			w.log.Warn("acking completed task", "task_id", a.id, "error", err)
		}
		w.rec.record(a.p, a.typ, o)
	}
}
