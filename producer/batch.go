package producer

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// BatchResult is the outcome of one task of a batch: its EnqueueResult when
// Err is nil. A task with an error was not enqueued, except that a task whose
// ack did not arrive before ctx ended (Err wraps the context's error) may
// have been stored: enqueue it again with the same id to be sure.
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

	type inFlight struct {
		i       int
		p       prepared
		claimed bool
		future  jetstream.PubAckFuture
	}
	flights := make([]inFlight, 0, len(tasks))
	now := time.Now()
	stall := jetstream.WithStallWait(c.timeout)
	for i, t := range tasks {
		if err := ctx.Err(); err != nil {
			results[i].ID = t.ID
			results[i].Err = fmt.Errorf("task %d not published: %w", i, context.Cause(ctx))
			continue
		}
		p, err := c.prepare(t, now, limit)
		results[i].ID = p.id
		if err != nil {
			results[i].Err = err
			continue
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
		f, err := c.js.PublishMsgAsync(p.msg, stall)
		if err != nil {
			results[i].Err = fmt.Errorf("publishing task %q to %s: %w", p.id, p.msg.Subject, translate(err))
			if claimed {
				c.releaseUnique(ctx, p.uniqueKey, p.id)
			}
			continue
		}
		flights = append(flights, inFlight{i: i, p: p, claimed: claimed, future: f})
	}

	for _, f := range flights {
		ack, err := awaitAck(ctx, f.future)
		switch {
		case err == nil:
			results[f.i].EnqueueResult = f.p.result(ack)
		case ctx.Err() != nil && errors.Is(err, context.Cause(ctx)):
			results[f.i].Err = fmt.Errorf("waiting for the ack of task %q (it may be stored; enqueue it again with the same id): %w",
				f.p.id, err)
		default:
			results[f.i].Err = fmt.Errorf("publishing task %q to %s: %w", f.p.id, f.p.msg.Subject, translate(err))
			if f.claimed {
				c.releaseUnique(ctx, f.p.uniqueKey, f.p.id)
			}
		}
	}
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

// awaitAck returns the future's outcome, preferring one already there over
// the end of ctx.
func awaitAck(ctx context.Context, f jetstream.PubAckFuture) (*jetstream.PubAck, error) {
	select {
	case ack := <-f.Ok():
		return ack, nil
	case err := <-f.Err():
		return nil, err
	default:
	}
	select {
	case ack := <-f.Ok():
		return ack, nil
	case err := <-f.Err():
		return nil, err
	case <-ctx.Done():
		return nil, context.Cause(ctx)
	}
}
