package producer

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	spool "github.com/spoolq/spool/shared"
	"github.com/spoolq/spool/shared/jsproto"
)

// Result reads the result document of task id from the results bucket.
// Consumers write the document when they first pick a task up; before that,
// a delayed task whose schedule is pending is reported with State
// spool.StateScheduled (NextAttempt is when it is due), and any other task
// gives ErrTaskNotFound: still queued or waiting beside the task subjects
// (parked while its type is paused, held for its key's turn, in a
// concurrency limit's waiting room, see streams.Places), expired, or never
// enqueued. Result reads no backlog to tell these apart; Cancel does. A
// task that completed with its result discarded (spool.DiscardResult, or
// the worker's rule for its type) has no document: Result returns a
// *ResultDiscardedError, which wraps ErrResultDiscarded.
func (c *Client) Result(ctx context.Context, id string) (spool.Result, error) {
	if err := spool.ValidateID(id); err != nil {
		return spool.Result{}, invalid("id", err)
	}
	ctx, cancel := c.withTimeout(ctx)
	defer cancel()
	st, err := c.readStored(ctx, id)
	switch {
	case err != nil:
		return spool.Result{}, err
	case st.discarded != nil:
		return spool.Result{}, st.discarded
	case st.found:
		return st.doc, nil
	}
	return c.scheduledResult(ctx, id)
}

// Wait waits until the result document of task id reaches a terminal
// state (completed, dead or cancelled) and returns it. It waits as long as ctx
// allows: give it a deadline. A document that is not there yet is waited
// for. A task whose result is discarded ends the wait as it completes,
// with a *ResultDiscardedError (ErrResultDiscarded): the marker it leaves
// in place of its document is written before its ack, like any result.
//
// Wait needs no JetStream consumer, whose creation an election could
// swallow: it subscribes to the key's subject ($KV.<bucket>.<id>) with
// core NATS first, so no write is missed, then reads the key (each read
// bounded and retried, see jsproto.Tries), and reads it again every
// WaitRecheck as a safety net for a write it did not see (a reconnect in
// between). A terminal document seen on the subject is read back before
// Wait returns it, so what Wait returns is stored and Result finds it.
// Through an election Wait only ends with the result or with ctx: the
// subscribing round trip is retried through the loss of the connection's
// server, and a read the cluster does not answer is tried again at the
// next recheck. When ctx ends first, the error says the last state seen.
func (c *Client) Wait(ctx context.Context, id string) (spool.Result, error) {
	if err := spool.ValidateID(id); err != nil {
		return spool.Result{}, invalid("id", err)
	}
	updates := make(chan *nats.Msg, 1)
	sub, err := c.nc.Subscribe(c.names.ResultSubject(id), func(m *nats.Msg) {
		select { // keep the latest write only: a reader needs no more
		case updates <- m:
		default:
			select {
			case <-updates:
			default:
			}
			select {
			case updates <- m:
			default:
			}
		}
	})
	if err != nil {
		return spool.Result{}, fmt.Errorf("subscribing to the result of task %q: %w", id, err)
	}
	defer func() {
		if err := sub.Unsubscribe(); err != nil && !errors.Is(err, nats.ErrConnectionClosed) {
			c.logger.DebugContext(ctx, "ending result subscription", "task_id", id, "error", err)
		}
	}()
	// Round trip: the server has the subscription before the first read,
	// so a write after the read is seen on it. Retried like a request
	// within ctx: the connection may be lost with its server in an
	// election, and nats.go ends a flush in flight then.
	err = c.do(ctx, "subscribing to the result of task "+id, func(ctx context.Context) error {
		return jsproto.Flush(ctx, c.nc)
	})
	if err != nil {
		return spool.Result{}, fmt.Errorf("waiting for task %q: subscribing: %w", id, err)
	}
	var last spool.Result
	var lastErr error // of the last read that failed
	// A terminal document seen on the subject is confirmed by a read
	// before Wait returns: the publish is seen before the bucket stores
	// it, and a Result right after Wait must find what Wait returned.
	confirming := 0
	recheck := time.NewTimer(0)
	defer recheck.Stop()
	for {
		select {
		case <-ctx.Done():
			err := context.Cause(ctx)
			if lastErr != nil {
				err = fmt.Errorf("%w (last read: %w)", err, lastErr)
			}
			if last.ID != "" {
				return last, fmt.Errorf("waiting for task %q (last state %s): %w", id, last.State, err)
			}
			return last, fmt.Errorf("waiting for task %q: %w", id, err)
		case m := <-updates:
			if spool.IsDiscardedMarker(m.Header) {
				// Completed with its result discarded: confirmed by a
				// read, as a terminal document is.
				if confirming == 0 {
					confirming = 1
					recheck.Reset(0)
				}
				continue
			}
			if op := m.Header.Get(kvOperationHeader); op != "" {
				continue // a deleted or purged document
			}
			var r spool.Result
			if err := spool.DecodeDocument(resultDocument, id, m.Data, &r); err != nil {
				return r, err
			}
			last = r
			if r.State.Terminal() && confirming == 0 {
				confirming = 1
				recheck.Reset(0)
			}
		case <-recheck.C:
			// One read, bounded by the recheck interval: a read the
			// cluster does not answer is tried again at the next one,
			// while the subscription keeps listening.
			rctx, cancel := context.WithTimeout(ctx, WaitRecheck)
			r, found, err := c.readResult(rctx, id)
			cancel()
			switch {
			case err != nil && ctx.Err() == nil && jsproto.Retryable(err):
				lastErr = err
			case err != nil:
				return r, err
			case found && r.State.Terminal():
				return r, nil
			case found:
				last = r
			}
			next := WaitRecheck
			if confirming > 0 {
				// Stored in a moment: read again soon.
				next = min(10*time.Millisecond<<min(confirming, 7), time.Second)
				confirming++
			}
			recheck.Reset(next)
		}
	}
}

// WaitRecheck is how often Wait reads the result again while it waits, as
// a safety net for a write its subscription did not see.
const WaitRecheck = 5 * time.Second

// kvOperationHeader marks a KV delete or purge (nats.go's kvop header).
const kvOperationHeader = "KV-Operation"

// readResult reads the result document of id, retried through an
// election within ctx; found is false when there is none yet. The marker
// of a discarded result gives its *ResultDiscardedError.
func (c *Client) readResult(ctx context.Context, id string) (r spool.Result, found bool, err error) {
	st, err := c.readStored(ctx, id)
	switch {
	case err != nil:
		return r, false, err
	case st.discarded != nil:
		return r, false, st.discarded
	}
	return st.doc, st.found, nil
}

// stored is what the results bucket holds for a task: its document
// (found), the marker of its discarded result (discarded), or neither.
type stored struct {
	doc       spool.Result
	found     bool
	discarded *ResultDiscardedError
	// rev is the sequence of the key's last message, a delete's too; 0
	// when the key has none. A write over it succeeds only if nobody
	// wrote the key since.
	rev uint64
}

// readStored reads the last message of task id's key in the results
// bucket, retried through an election within ctx. Reading the message
// rather than the KV entry shows what a delete says: the marker of a
// discarded result (spool.IsDiscardedMarker) is a delete.
func (c *Client) readStored(ctx context.Context, id string) (stored, error) {
	s, err := c.resultsStream(ctx)
	if err != nil {
		return stored{}, err
	}
	var msg *jetstream.RawStreamMsg
	err = c.do(ctx, "reading the result of task "+id, func(ctx context.Context) (err error) {
		msg, err = s.GetLastMsgForSubject(ctx, c.names.ResultSubject(id))
		return err
	})
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return stored{}, nil
	}
	if err != nil {
		return stored{}, fmt.Errorf("reading the result of task %q: %w", id, err)
	}
	st := stored{rev: msg.Sequence}
	switch {
	case spool.IsDiscardedMarker(msg.Header):
		st.discarded = &ResultDiscardedError{ID: id, CompletedAt: msg.Time}
	case msg.Header.Get(kvOperationHeader) != "":
		// A deleted document.
	default:
		if err := spool.DecodeDocument(resultDocument, id, msg.Data, &st.doc); err != nil {
			return st, err
		}
		st.found = true
	}
	return st, nil
}

// resultDocument is the kind of document a *spool.DocumentError names.
const resultDocument = "result document"

// scheduledResult describes task id from its pending schedule, or returns
// ErrTaskNotFound when it has none.
func (c *Client) scheduledResult(ctx context.Context, id string) (spool.Result, error) {
	notFound := &TaskNotFoundError{ID: id}
	subject, err := c.names.SchedSubject(id)
	if err != nil {
		return spool.Result{}, invalid("id", err)
	}
	s, _, err := c.taskStream(ctx)
	if err != nil {
		return spool.Result{}, err
	}
	var msg *jetstream.RawStreamMsg
	err = c.do(ctx, "looking up the schedule of task "+id, func(ctx context.Context) (err error) {
		msg, err = s.GetLastMsgForSubject(ctx, subject)
		return err
	})
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return spool.Result{}, notFound
	}
	if err != nil {
		return spool.Result{}, fmt.Errorf("looking up the schedule of task %q: %w", id, err)
	}
	r := spool.Result{ID: id, State: spool.StateScheduled}
	r.EnqueuedAt, r.HandedBackAt = spool.EnqueueTimes(msg.Header, msg.Time)
	if p, typ, err := c.names.ParseTaskSubject(msg.Header.Get(spool.HeaderScheduleTarget)); err == nil {
		r.Priority, r.Type = p, typ
	}
	if at, ok := strings.CutPrefix(msg.Header.Get(spool.HeaderSchedule), "@at "); ok {
		if t, err := time.Parse(time.RFC3339Nano, at); err == nil {
			r.NextAttempt = &t
		}
	}
	r.TraceParent = msg.Header.Get(spool.HeaderTraceParent)
	return r, nil
}
