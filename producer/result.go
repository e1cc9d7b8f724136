package producer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	spool "github.com/spoolq/spool/shared"
)

// Result reads the result document of task id from the results bucket.
// Consumers write the document when they first pick a task up; before that,
// a delayed task whose schedule is pending is reported with State
// spool.StateScheduled (NextAttempt is when it is due), and any other task
// gives ErrTaskNotFound (still queued, expired, or never enqueued).
func (c *Client) Result(ctx context.Context, id string) (spool.Result, error) {
	if err := spool.ValidateID(id); err != nil {
		return spool.Result{}, invalid("id", err)
	}
	ctx, cancel := c.withTimeout(ctx)
	defer cancel()
	kv, err := c.resultsBucket(ctx)
	if err != nil {
		return spool.Result{}, err
	}
	entry, err := kv.Get(ctx, id)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return c.scheduledResult(ctx, id)
	}
	if err != nil {
		return spool.Result{}, fmt.Errorf("reading the result of task %q: %w", id, err)
	}
	return decodeResult(id, entry)
}

// Wait watches the result document of task id until it reaches a terminal
// state (completed or dead) and returns it. It waits as long as ctx allows:
// give it a deadline. A document that is not there yet is waited for.
func (c *Client) Wait(ctx context.Context, id string) (spool.Result, error) {
	if err := spool.ValidateID(id); err != nil {
		return spool.Result{}, invalid("id", err)
	}
	// The watcher's subscription lives until ctx ends: end it on return.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	openCtx, openCancel := c.withTimeout(ctx)
	kv, err := c.resultsBucket(openCtx)
	if err != nil {
		openCancel()
		return spool.Result{}, err
	}
	w, err := kv.Watch(ctx, id)
	openCancel()
	if err != nil {
		return spool.Result{}, fmt.Errorf("watching the result of task %q: %w", id, err)
	}
	defer func() {
		if err := w.Stop(); err != nil && !errors.Is(err, context.Canceled) {
			c.logger.DebugContext(ctx, "stopping result watcher", "task_id", id, "error", err)
		}
	}()
	var last spool.Result
	for {
		select {
		case <-ctx.Done():
			if last.ID != "" {
				return last, fmt.Errorf("waiting for task %q (last state %s): %w", id, last.State, context.Cause(ctx))
			}
			return last, fmt.Errorf("waiting for task %q: %w", id, context.Cause(ctx))
		case entry, ok := <-w.Updates():
			if !ok {
				return last, fmt.Errorf("waiting for task %q: watcher closed: %w", id, context.Cause(ctx))
			}
			if entry == nil || entry.Operation() != jetstream.KeyValuePut {
				continue // end of initial values, or a deleted document
			}
			r, err := decodeResult(id, entry)
			if err != nil {
				return r, err
			}
			if r.State.Terminal() {
				return r, nil
			}
			last = r
		}
	}
}

func decodeResult(id string, entry jetstream.KeyValueEntry) (spool.Result, error) {
	var r spool.Result
	if err := json.Unmarshal(entry.Value(), &r); err != nil {
		return r, fmt.Errorf("decoding the result of task %q (revision %d): %w", id, entry.Revision(), err)
	}
	return r, nil
}

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
	msg, err := s.GetLastMsgForSubject(ctx, subject)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return spool.Result{}, notFound
	}
	if err != nil {
		return spool.Result{}, fmt.Errorf("looking up the schedule of task %q: %w", id, err)
	}
	r := spool.Result{ID: id, State: spool.StateScheduled, EnqueuedAt: msg.Time}
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
