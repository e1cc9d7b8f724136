package producer

import (
	"context"
	"fmt"
	"time"

	"github.com/spoolq/spool/shared/jsproto"
	"github.com/spoolq/spool/shared/limits"
)

// BatchResult is the outcome of one task of a batch: its EnqueueResult when
// Err is nil. A task with an error was not enqueued, except that a task whose
// ack did not arrive (Err says "it may be stored" and wraps the context's
// error, jetstream.ErrAsyncPublishTimeout after the client's timeout, or
// jetstream.ErrJetStreamPublisherClosed after Close) may have been stored:
// enqueue it again with the same id to be sure. Such a task keeps its
// unique key.
type BatchResult struct {
	EnqueueResult
	Err error `json:"-"`
}

// BatchError summarises a batch with failed tasks. It unwraps to the first
// failure, so errors.Is(err, ErrQueueFull) tells why the first task failed.
type BatchError struct {
	Failed, Total int
	First         error
}

func (e *BatchError) Error() string {
	return fmt.Sprintf("%d of %d tasks not enqueued; first: %v", e.Failed, e.Total, e.First)
}

// Unwrap returns the first task's error.
func (e *BatchError) Unwrap() error { return e.First }

// EnqueueBatch enqueues tasks with asynchronous publishes, keeping at most
// the client's publish window (WithPublishWindow) in flight, and reports
// every task's outcome in input order: results has one entry per task, and
// err is a *BatchError when any task failed. Each task is validated and has
// its unique key claimed on its own: one bad task fails alone. Steps are
// bounded by the client's timeout when ctx has no deadline; when ctx ends,
// the remaining tasks fail with its error.
func (c *Client) EnqueueBatch(ctx context.Context, tasks []Task) ([]BatchResult, error) {
	results := make([]BatchResult, len(tasks))
	lookupCtx, cancel := c.withTimeout(ctx)
	_, limit, err := c.taskStream(lookupCtx)
	cancel()
	if err != nil {
		for i := range results {
			results[i].ID = tasks[i].ID
			results[i].Err = err
		}
		return results, c.batchError(results)
	}

	b, err := c.acks.open(len(tasks))
	if err != nil {
		for i := range results {
			results[i].ID = tasks[i].ID
			results[i].Err = err
		}
		return results, c.batchError(results)
	}
	now := time.Now()
	var last lastSubject
	held := map[heldKey]*limits.Turns{}
	for i, t := range tasks {
		if err := ctx.Err(); err != nil {
			results[i].ID = t.ID
			results[i].Err = fmt.Errorf("task %d not published: %w", i, context.Cause(ctx))
			continue
		}
		p, err := c.prepare(t, now, limit, &last)
		results[i].ID = p.id
		if err != nil {
			results[i].Err = err
			continue
		}
		if t.Key != "" && !p.scheduled {
			octx, cancel := c.withTimeout(ctx)
			turns, window, err := c.keyWindow(octx, t.Type, t.Key)
			cancel()
			if err != nil {
				results[i].Err = err
				continue
			}
			if window > 0 {
				// Parked on its key's held subject, in batch order; the
				// keys are started once the batch is stored.
				turns.Hold(t.Type, t.Key, p.msg)
				held[heldKey{t.Type, t.Key, window}] = turns
			}
		}
		claimed := false
		if p.uniqueKey != "" {
			uctx, cancel := c.withTimeout(ctx)
			claimed, err = c.claimUnique(uctx, p)
			cancel()
			if err != nil {
				results[i].Err = err
				continue
			}
		}
		if err := c.acks.publish(ctx, b, i, p, claimed); err != nil {
			if ctx.Err() != nil {
				results[i].Err = fmt.Errorf("task %d not published: %w", i, err)
			} else {
				results[i].Err = fmt.Errorf("publishing task %q to %s: %w", p.id, p.msg.Subject, translate(err))
			}
			if claimed {
				c.releaseUnique(ctx, p.uniqueKey, p.id)
			}
		}
	}

	c.acks.wait(ctx, b)
	// A publish an election swallowed (no ack in time, no stream to
	// answer) is sent again, one at a time, within the caller's deadline
	// (the client's timeout when ctx has none): it keeps its Nats-Msg-Id,
	// so a first copy that was stored after all makes it a Duplicate.
	retryCtx, cancelRetry := c.withTimeout(ctx)
	defer cancelRetry()
	for i := range b.flights {
		f := &b.flights[i]
		if (f.state != lost && f.state != failed) || !jsproto.Retryable(f.err) || ctx.Err() != nil {
			continue
		}
		ack, err := c.publish(retryCtx, f.p.id, f.p.msg)
		if err == nil {
			f.outcome = outcome{state: acked, seq: ack.Sequence, dup: ack.Duplicate}
		} else {
			f.err = fmt.Errorf("%w; sent again: %w", f.err, err)
		}
	}
	for i := range b.flights {
		f := &b.flights[i]
		switch f.state {
		case acked:
			results[i].EnqueueResult = f.p.result(f.seq, f.dup)
			c.enqueued(f.p, f.dup)
		case lost:
			results[i].Err = fmt.Errorf("waiting for the ack of task %q (it may be stored; enqueue it again with the same id): %w",
				f.p.id, f.err)
		case failed:
			results[i].Err = fmt.Errorf("publishing task %q to %s: %w", f.p.id, f.p.msg.Subject, translate(f.err))
			if f.claimed {
				c.releaseUnique(ctx, f.p.uniqueKey, f.p.id)
			}
		}
	}
	c.kickHeld(retryCtx, held)
	err = c.batchError(results)
	c.logger.DebugContext(ctx, "batch enqueued", "tasks", len(tasks), "error", err)
	return results, err
}

func (c *Client) batchError(results []BatchResult) error {
	var be *BatchError
	for _, r := range results {
		if r.Err == nil {
			continue
		}
		if be == nil {
			be = &BatchError{Total: len(results), First: r.Err}
		}
		be.Failed++
	}
	if be == nil {
		return nil
	}
	return be
}
