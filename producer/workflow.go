package producer

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/spoolq/spool/shared/workflow"
)

// Workflows (see package shared/workflow): the client stores a workflow
// itself and enqueues its first steps; workers advance it from there, each
// finishing step enqueueing the steps that were waiting for it. Build the
// document with workflow.Doc's Chain, Group and Add.

// workflows returns the workflow store, opened on first use.
func (c *Client) workflows(ctx context.Context) (*workflow.Store, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.wf != nil {
		return c.wf, nil
	}
	s, err := workflow.Open(ctx, c.js, c.names, c.logger)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, fmt.Errorf("%w: KV bucket %q does not exist (run spool-admin provision): %w", ErrNotProvisioned, c.names.WorkflowsBucket(), err)
	}
	if err != nil {
		return nil, err
	}
	c.wf = s
	return s, nil
}

// SubmitWorkflow validates doc, stores the workflow and enqueues the steps
// that wait for nothing; it returns the workflow id (doc.ID, or a new
// time-ordered id). An invalid document (cycle, unknown dependency,
// duplicate step name, too large) is refused with an error wrapping
// workflow.ErrInvalid before anything is stored; an id used before, with
// workflow.ErrExists. Without a deadline in ctx the client's timeout
// applies. A submission that failed midway (a lost connection) may have
// stored the workflow: submitting it again then gives workflow.ErrExists,
// and RetryWorkflow enqueues whatever steps are ready and not enqueued.
func (c *Client) SubmitWorkflow(ctx context.Context, doc workflow.Doc) (string, error) {
	if err := doc.Validate(); err != nil {
		return "", err
	}
	ctx, cancel := c.withTimeout(ctx)
	defer cancel()
	s, err := c.workflows(ctx)
	if err != nil {
		return "", err
	}
	return s.Submit(ctx, doc)
}

// WorkflowStatus returns a workflow's state and each step's (state, task
// id, and the task's result document: attempts, result, error). An unknown
// id is an error wrapping workflow.ErrNotFound.
func (c *Client) WorkflowStatus(ctx context.Context, id string) (workflow.Status, error) {
	ctx, cancel := c.withTimeout(ctx)
	defer cancel()
	s, err := c.workflows(ctx)
	if err != nil {
		return workflow.Status{}, err
	}
	return s.Status(ctx, id)
}

// WaitWorkflow waits until the workflow is completed, failed or cancelled
// and returns its status. It waits as long as ctx allows (no default
// timeout).
func (c *Client) WaitWorkflow(ctx context.Context, id string) (workflow.Status, error) {
	s, err := c.workflows(ctx)
	if err != nil {
		return workflow.Status{}, err
	}
	if _, err := s.Wait(ctx, id); err != nil {
		return workflow.Status{}, err
	}
	return s.Status(ctx, id)
}

// CancelWorkflow cancels a running workflow: steps not started end
// cancelled, and every step whose task is queued or running has its task
// cancelled (Cancel: a running handler's context ends), so the workflow
// ends cancelled without waiting for them. A finished workflow is left as
// it is. It returns the workflow record. Cancelling the steps' tasks needs
// the right to cancel tasks (the broker's role has it); where the caller
// lacks it, the running steps finish on their own and the error says so.
func (c *Client) CancelWorkflow(ctx context.Context, id string) (workflow.Record, error) {
	ctx, cancel := c.withTimeout(ctx)
	defer cancel()
	s, err := c.workflows(ctx)
	if err != nil {
		return workflow.Record{}, err
	}
	r, err := s.Cancel(ctx, id)
	if err != nil {
		return r, err
	}
	st, err := s.Status(ctx, id)
	if err != nil {
		return r, fmt.Errorf("workflow %q cancelled; reading its steps to cancel the running ones: %w", id, err)
	}
	var errs []error
	for _, step := range st.Steps {
		if step.TaskID == "" || step.State.Terminal() || step.Task != nil && step.Task.State.Terminal() {
			continue
		}
		_, err := c.Cancel(ctx, step.TaskID, CancelBy("workflow "+id), CancelReason("the workflow was cancelled"))
		if err != nil && !errors.Is(err, ErrTaskFinished) && !errors.Is(err, ErrTaskNotFound) {
			errs = append(errs, fmt.Errorf("step %q (task %q): %w", step.Name, step.TaskID, err))
		}
	}
	if len(errs) > 0 {
		return r, fmt.Errorf("workflow %q cancelled, but its running steps finish on their own: %w", id, errors.Join(errs...))
	}
	return r, nil
}

// RetryWorkflow runs a failed or cancelled workflow again from the steps
// that did not complete; completed steps keep their results.
func (c *Client) RetryWorkflow(ctx context.Context, id string) (workflow.Record, error) {
	ctx, cancel := c.withTimeout(ctx)
	defer cancel()
	s, err := c.workflows(ctx)
	if err != nil {
		return workflow.Record{}, err
	}
	return s.RetryFailed(ctx, id)
}

// Workflows lists every workflow, newest first.
func (c *Client) Workflows(ctx context.Context) ([]workflow.Summary, error) {
	ctx, cancel := c.withTimeout(ctx)
	defer cancel()
	s, err := c.workflows(ctx)
	if err != nil {
		return nil, err
	}
	return s.List(ctx)
}
