package producer

import (
	"context"
	"fmt"
	"time"
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

// EnqueueBatch enqueues tasks with EnqueueAsync, keeping at most the
// client's publish window (WithPublishWindow) in flight, and reports
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

	now := time.Now()
	c.served.refresh(ctx, now)
	var last lastSubject
	pending := make([]*Pending, len(tasks))
	// Tasks of ordered or fair keys are parked on their key's held
	// subject in batch order; their keys start once the batch is stored.
	held := map[heldKey]bool{}
	for i, t := range tasks {
		p, err := c.enqueueAsync(ctx, t, now, limit, &last, held)
		if err != nil {
			results[i].ID = t.ID
			if p != nil {
				results[i].ID = p.id
			}
			results[i].Err = fmt.Errorf("task %d: %w", i, err)
			continue
		}
		pending[i] = p
	}
	// A client's first batch waits for the first check of the types the
	// workers serve, as its first Enqueue does; each type is checked once.
	c.served.settle(ctx)
	for i, p := range pending {
		if p != nil {
			results[i].EnqueueResult, results[i].Err = p.Wait(ctx)
		}
	}
	for k := range held {
		c.kick(ctx, k.typ, k.key)
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
