package producer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	spool "github.com/spoolq/spool/shared"
	"github.com/spoolq/spool/shared/workflow"
	"github.com/spoolq/spool/streams"
)

// CancelOption sets who cancels a task and why.
type CancelOption func(*spool.Cancellation)

// CancelBy names who cancels (a user, a service); it is stored in the
// result document's cancelled_by. Default: "<hostname>-<pid>" of this
// process.
func CancelBy(who string) CancelOption { return func(c *spool.Cancellation) { c.By = who } }

// CancelReason says why; it is stored in the result document's
// cancel_reason. Default: none.
func CancelReason(why string) CancelOption { return func(c *spool.Cancellation) { c.Reason = why } }

// Cancel cancels task id wherever it is, and returns its cancelled result
// document:
//
//   - delayed: its schedule is deleted, so it never fires;
//   - queued (no worker has written a state yet): it never runs; the
//     worker that pulls it drops it;
//   - running: the worker running it (or its remote handler) sees the
//     cancellation on its subject and cancels the handler's context at
//     once; the attempt ends without a retry or a dead letter.
//
// The cancellation is stored in the cancel bucket (the tombstone workers
// check before running a task) and the result document becomes cancelled,
// with CancelledBy and CancelReason. The task's unique key is released.
//
// A task that already reached a terminal state gives an error wrapping
// ErrTaskFinished, and the document as it is; an id found nowhere (no
// result, no schedule, not in the task stream) gives ErrTaskNotFound.
// Finding a task that has no result document yet reads the task stream's
// backlog one message at a time: a deep backlog needs a longer ctx.
func (c *Client) Cancel(ctx context.Context, id string, opts ...CancelOption) (spool.Result, error) {
	if err := spool.ValidateID(id); err != nil {
		return spool.Result{}, invalid("id", err)
	}
	cn := spool.Cancellation{ID: id, By: defaultCanceller()}
	for _, o := range opts {
		o(&cn)
	}
	ctx, cancel := c.withTimeout(ctx)
	defer cancel()
	var (
		doc       spool.Result
		uniqueKey string
		stored    bool
		// ours: this call's write stored the cancelled document, so it
		// announces it; a worker that wrote it first announced it.
		ours bool
	)
	// The cancelled document replaces exactly the revision read (or
	// creates the first one): a worker that wrote meanwhile (completed,
	// say) makes the write fail, and the loop reads again.
	for try := 0; try < 5 && !stored; try++ {
		var rev uint64
		var err error
		doc, rev, uniqueKey, err = c.locate(ctx, id)
		if err != nil {
			return doc, err
		}
		if try > 0 && doc.State == spool.StateCancelled {
			// The worker met the cancellation first and wrote it, or an
			// earlier write of ours was stored and its answer lost (its
			// finished_at is our cancellation's time).
			stored = true
			ours = doc.FinishedAt != nil && doc.FinishedAt.Equal(cn.At)
			break
		}
		if doc.ResultDiscarded {
			return doc, fmt.Errorf("%w: task %q is completed (its result was discarded)", ErrTaskFinished, id)
		}
		if doc.State.Terminal() {
			return doc, fmt.Errorf("%w: task %q is %s", ErrTaskFinished, id, doc.State)
		}
		if try == 0 {
			cn.At = time.Now().UTC()
			if err := c.putCancellation(ctx, cn); err != nil {
				return doc, err
			}
		}
		if doc.State == spool.StateScheduled {
			if err := c.deleteSchedule(ctx, id); err != nil {
				return doc, err
			}
		}
		doc.State = spool.StateCancelled
		doc.CancelledBy, doc.CancelReason = cn.By, cn.Reason
		doc.FinishedAt = &cn.At
		doc.NextAttempt, doc.Error, doc.Reason, doc.Progress = nil, "", "", nil
		if stored, err = c.putResult(ctx, doc, rev); err != nil {
			return doc, err
		}
		ours = stored
	}
	if !stored {
		return doc, fmt.Errorf("task %q: its result kept changing while cancelling; its cancellation is stored, a worker ends it as it meets it", id)
	}
	if uniqueKey != "" {
		if _, err := c.deleteUniqueIfHeld(ctx, uniqueKey, id); err != nil {
			return doc, fmt.Errorf("task %q cancelled, but releasing its unique key: %w", id, err)
		}
	}
	if ours {
		c.event(spool.EventCancelled, doc)
	}
	c.logger.InfoContext(ctx, "task cancelled", "task_id", id, "by", cn.By, "reason", cn.Reason)
	return doc, nil
}

// locate finds task id: its result document, else its schedule, else the
// task in the stream. rev is the revision of the task's key in the results
// bucket (0: none), the one a cancelled document is written over.
// uniqueKey is the task's unique key when the schedule or the queued task
// shows it. A task that completed with its result discarded is reported
// completed (discarded).
func (c *Client) locate(ctx context.Context, id string) (doc spool.Result, rev uint64, uniqueKey string, err error) {
	st, err := c.readStored(ctx, id)
	if err != nil || st.found || st.discarded != nil {
		return st.outcome(id), st.rev, "", err
	}
	rev = st.rev // 0, or a deleted document's revision
	if doc, err = c.scheduledResult(ctx, id); err == nil {
		uniqueKey, err = c.scheduleUniqueKey(ctx, id)
		return doc, rev, uniqueKey, err
	}
	if !errors.Is(err, ErrTaskNotFound) {
		return doc, 0, "", err
	}
	found, err := c.findTask(ctx, id)
	if err != nil {
		return doc, 0, "", err
	}
	if found == nil {
		// A worker stores a task's result before its ack removes it from
		// the stream: a task that finished after the first read of its
		// result has it now.
		st, err = c.readStored(ctx, id)
		if err != nil || st.found || st.discarded != nil {
			return st.outcome(id), st.rev, "", err
		}
		return doc, 0, "", fmt.Errorf("%w: task %q has no result, no pending schedule and is in no place of the task streams (never enqueued, or its result expired)", ErrTaskNotFound, id)
	}
	msg := found.Msg
	doc = spool.Result{ID: id, State: spool.StatePending, TraceParent: msg.Header.Get(spool.HeaderTraceParent)}
	doc.EnqueuedAt, doc.HandedBackAt = spool.EnqueueTimes(msg.Header, msg.Time)
	if p, typ, err := c.names.ParseTaskSubject(found.TaskSubject(c.names)); err == nil {
		doc.Priority, doc.Type = p, typ
	}
	return doc, rev, msg.Header.Get(spool.HeaderUniqueKey), nil
}

// outcome is the document st holds, or for the marker of a discarded
// result the little it tells: the task completed, and when.
func (st stored) outcome(id string) spool.Result {
	if st.discarded == nil {
		return st.doc
	}
	at := st.discarded.CompletedAt
	return spool.Result{ID: id, State: spool.StateCompleted, FinishedAt: &at, ResultDiscarded: true}
}

// findTask looks for task id in every place of the task streams
// (streams.Places): SPOOL_TASKS, then the task partitions after the
// first (streams.Settings.Partitions). nil when it is nowhere.
func (c *Client) findTask(ctx context.Context, id string) (*streams.Found, error) {
	s, _, err := c.taskStream(ctx)
	if err != nil {
		return nil, err
	}
	var found *streams.Found
	err = c.do(ctx, "looking for task "+id+" in the task stream", func(ctx context.Context) (err error) {
		found, err = streams.FindTask(ctx, s, c.names, id)
		return err
	})
	if err != nil {
		return nil, err
	}
	for k := 1; found == nil && k < streams.PartitionsOf(s.CachedInfo().Config); k++ {
		name := c.names.PartitionStream(k)
		err = c.do(ctx, "looking for task "+id+" in "+name, func(ctx context.Context) error {
			part, err := c.js.Stream(ctx, name)
			if err != nil {
				return err
			}
			found, err = streams.FindTask(ctx, part, c.names, id)
			return err
		})
		if err != nil {
			return nil, fmt.Errorf("looking for task %q in %s: %w", id, name, err)
		}
	}
	return found, nil
}

func (c *Client) scheduleUniqueKey(ctx context.Context, id string) (string, error) {
	subject, err := c.names.SchedSubject(id)
	if err != nil {
		return "", invalid("id", err)
	}
	s, _, err := c.taskStream(ctx)
	if err != nil {
		return "", err
	}
	var msg *jetstream.RawStreamMsg
	err = c.do(ctx, "looking up the schedule of task "+id, func(ctx context.Context) (err error) {
		msg, err = s.GetLastMsgForSubject(ctx, subject)
		return err
	})
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("looking up the schedule of task %q: %w", id, err)
	}
	return msg.Header.Get(spool.HeaderUniqueKey), nil
}

// deleteSchedule removes the pending schedule of task id; one that fired
// or went meanwhile is not an error (the tombstone stops the task). A
// schedule that a worker must meet when it fires is left to fire, and
// the worker drops the task: a task handed back while it holds a place in
// its key's turn (Spool-Order-Seq), which it passes on as it is dropped,
// and a workflow step, whose workflow advances as it is dropped.
func (c *Client) deleteSchedule(ctx context.Context, id string) error {
	subject, err := c.names.SchedSubject(id)
	if err != nil {
		return invalid("id", err)
	}
	s, _, err := c.taskStream(ctx)
	if err != nil {
		return err
	}
	var msg *jetstream.RawStreamMsg
	err = c.do(ctx, "looking up the schedule of task "+id, func(ctx context.Context) (err error) {
		msg, err = s.GetLastMsgForSubject(ctx, subject)
		return err
	})
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("looking up the schedule of task %q: %w", id, err)
	}
	if msg.Header.Get(spool.HeaderOrderSeq) != "" || msg.Header.Get(workflow.HeaderWorkflow) != "" {
		return nil
	}
	err = c.do(ctx, "deleting the schedule of task "+id, func(ctx context.Context) error {
		return s.DeleteMsg(ctx, msg.Sequence)
	})
	if err != nil && !errors.Is(err, jetstream.ErrMsgNotFound) && !isMsgGone(err) {
		return fmt.Errorf("deleting the schedule of task %q (seq %d): %w", id, msg.Sequence, err)
	}
	return nil
}

func (c *Client) putCancellation(ctx context.Context, cn spool.Cancellation) error {
	kv, err := c.cancelBucket(ctx)
	if err != nil {
		return err
	}
	b, err := json.Marshal(cn)
	if err != nil {
		return fmt.Errorf("encoding the cancellation of task %q: %w", cn.ID, err)
	}
	err = c.do(ctx, "storing the cancellation of task "+cn.ID, func(ctx context.Context) error {
		_, err := kv.Put(ctx, cn.ID, b)
		return err
	})
	if err != nil {
		return fmt.Errorf("storing the cancellation of task %q: %w", cn.ID, err)
	}
	return nil
}

// putResult writes doc over revision rev (0: creates it); stored is false
// when another write came first.
func (c *Client) putResult(ctx context.Context, doc spool.Result, rev uint64) (stored bool, err error) {
	kv, err := c.resultsBucket(ctx)
	if err != nil {
		return false, err
	}
	b, err := json.Marshal(doc)
	if err != nil {
		return false, fmt.Errorf("encoding the result of task %q: %w", doc.ID, err)
	}
	// A retried write whose first try was stored fails as a conflict: the
	// caller reads again and finds its own document. An update over
	// revision 0 creates the key only if it has no message at all: a
	// worker's marker of a discarded result, a delete, is a write that
	// came first.
	err = c.do(ctx, "writing the cancelled result of task "+doc.ID, func(ctx context.Context) error {
		_, err := kv.Update(ctx, doc.ID, b, rev)
		return err
	})
	if errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("writing the cancelled result of task %q: %w", doc.ID, err)
	}
	return true, nil
}

func defaultCanceller() string {
	host, err := os.Hostname()
	if err != nil {
		host = "unknown"
	}
	return host + "-" + strconv.Itoa(os.Getpid())
}

// isMsgGone reports the "no message found" API error DeleteMsg returns for a
// sequence that was removed meanwhile.
func isMsgGone(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && apiErr.ErrorCode == jetstream.JSErrCodeMessageNotFound
}
