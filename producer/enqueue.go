package producer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// EnqueueResult is the outcome of enqueueing one task.
type EnqueueResult struct {
	// ID is the task id, given or generated.
	ID string `json:"id"`
	// Subject is where the task was stored: spool.tasks.<priority>.<type>,
	// or spool.sched.<id> for a scheduled task.
	Subject string `json:"subject"`
	// Sequence is the stream sequence of the stored message (of the
	// schedule, for a scheduled task; the fired task gets a new one).
	Sequence uint64 `json:"sequence"`
	// Duplicate is true when the stream already held a message with this
	// id within its duplicate window: nothing new was stored.
	Duplicate bool `json:"duplicate"`
	// Scheduled is true when the task waits until ProcessAt.
	Scheduled bool `json:"scheduled"`
	// ProcessAt is when a scheduled task becomes deliverable; zero otherwise.
	ProcessAt time.Time `json:"process_at,omitzero"`
	// Warning, when set, says in a sentence why the stored task may never
	// run: no worker serves its type (see WithUnservedWarnings). The task
	// is stored all the same. The client does not log it.
	Warning string `json:"warning,omitempty"`
}

// Enqueue validates task (after applying opts), claims its unique key if it
// has one, and publishes it, waiting for JetStream's ack. A context without
// a deadline gets the client's default timeout. The result's Warning says
// when no worker serves the task's type; the client's first enqueue waits
// up to ServedCheckTimeout for the first check, run while the task is
// published.
//
// Errors: validation errors (*spool.FieldError, naming the field and its
// code, wrapping ErrInvalidType, ErrInvalidPriority, ...) before anything
// is published;
// *UniqueConflictError when another task holds the unique key; ErrQueueFull
// when JetStream's storage is exhausted; ErrNotProvisioned when the task
// stream is missing. On any error the task is not enqueued (a publish whose
// ack was lost may still have stored it: retrying with the same id is safe).
func (c *Client) Enqueue(ctx context.Context, task Task, opts ...EnqueueOption) (EnqueueResult, error) {
	for _, o := range opts {
		o(&task)
	}
	ctx, cancel := c.withTimeout(ctx)
	defer cancel()
	_, limit, err := c.taskStream(ctx)
	if err != nil {
		return EnqueueResult{}, err
	}
	now := time.Now()
	p, err := c.prepare(task, now, limit, nil)
	if err != nil {
		return EnqueueResult{}, err
	}
	// The type is checked while the task is published.
	c.served.refresh(ctx, now)
	res, err := c.enqueuePrepared(ctx, task, p)
	if err == nil {
		c.served.settle(ctx)
		res.Warning = c.served.warning(task.Type)
	}
	return res, err
}

// enqueuePrepared claims a prepared task's unique key and publishes it (or
// parks it on its key's held subject), waiting for the ack.
func (c *Client) enqueuePrepared(ctx context.Context, task Task, p prepared) (EnqueueResult, error) {
	claimed, err := c.claimUnique(ctx, p)
	if err != nil {
		return EnqueueResult{ID: p.id}, err
	}
	// A retried publish carries the same Nats-Msg-Id: the stream stores
	// the task once, and reports the copy a Duplicate.
	ack, err := c.publishOrParked(ctx, task, p)
	if err != nil && ackLost(err) {
		// The task may be stored: keep its unique key, which a retry with
		// the same id passes (the key names this id) and dedup absorbs.
		return EnqueueResult{ID: p.id}, fmt.Errorf("waiting for the ack of task %q (it may be stored; enqueue it again with the same id): %w", p.id, err)
	}
	if err != nil {
		err = fmt.Errorf("publishing task %q to %s: %w", p.id, p.msg.Subject, translate(err))
		if claimed {
			c.releaseUnique(ctx, p.uniqueKey, p.id)
		}
		return EnqueueResult{ID: p.id}, err
	}
	res := p.result(ack.Sequence, ack.Duplicate)
	c.enqueued(p, ack.Duplicate)
	if c.logger.Enabled(ctx, slog.LevelDebug) {
		c.logger.DebugContext(ctx, "task enqueued", "task_id", res.ID, "subject", res.Subject,
			"seq", res.Sequence, "duplicate", res.Duplicate, "scheduled", res.Scheduled)
	}
	return res, nil
}

// publishOrParked publishes the task, or parks it on its key's held
// subject when its type orders keys or shares the workers fairly between
// them (limits.Rule.KeyWindow).
func (c *Client) publishOrParked(ctx context.Context, task Task, p prepared) (*jetstream.PubAck, error) {
	if task.Key == "" || p.scheduled {
		return c.publish(ctx, p.id, p.msg)
	}
	window, err := c.keyWindow(ctx, task.Type, task.Key)
	if err != nil {
		return nil, err
	}
	if window == 0 {
		return c.publish(ctx, p.id, p.msg)
	}
	return c.park(ctx, task.Type, task.Key, p)
}

// publish publishes a task message and waits for its ack, retried through
// an election within ctx. A retried publish carries the same Nats-Msg-Id:
// the stream stores the task once, and reports the copy a Duplicate. No
// stream answering is an election's symptom, and a missing stream's: the
// stream is looked up then, and a missing one fails at once.
func (c *Client) publish(ctx context.Context, id string, msg *nats.Msg) (*jetstream.PubAck, error) {
	var ack *jetstream.PubAck
	err := c.do(ctx, "enqueueing task "+id, func(ctx context.Context) (err error) {
		ack, err = c.js.PublishMsg(ctx, msg)
		if errors.Is(err, jetstream.ErrNoStreamResponse) {
			if _, lerr := c.js.Stream(ctx, c.names.TaskStream()); errors.Is(lerr, jetstream.ErrStreamNotFound) {
				return fmt.Errorf("%w: %w", err, lerr)
			}
		}
		return err
	})
	return ack, err
}

// ackLost reports a publish whose outcome is unknown: it was sent, or may
// have been, and no answer came in time.
func ackLost(err error) bool {
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) || errors.Is(err, nats.ErrTimeout)
}

func (p prepared) result(seq uint64, duplicate bool) EnqueueResult {
	return EnqueueResult{
		ID:        p.id,
		Subject:   p.msg.Subject,
		Sequence:  seq,
		Duplicate: duplicate,
		Scheduled: p.scheduled,
		ProcessAt: p.processAt,
	}
}
