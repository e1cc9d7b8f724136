package consumer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	spool "github.com/spoolq/spool/shared"
	"github.com/spoolq/spool/shared/workflow"
)

// steps is the workflow feature of the worker. A step's task is a task
// with the workflow headers (workflow.HeaderWorkflow, workflow.HeaderStep).
// Before its handler runs, the steps gate asks the workflow store whether
// to run it; after its final outcome is stored (a completed result, or a
// dead letter) and before the task is acked, settling advances the
// workflow (finishStep). A crash between the two leaves the task unacked:
// its redelivery finds the outcome stored, skips the handler and advances
// again, idempotently. It also serves the reserved submission type. A nil
// wf means the deployment has no workflows bucket.
type steps struct {
	io     *taskIO
	policy *config // the retry delay of a task that comes back
	wf     *workflow.Store
}

// openSteps opens the workflows bucket; a deployment provisioned
// before workflows existed has none, and then step tasks are
// dead-lettered as bad input.
func openSteps(ctx context.Context, io *taskIO, policy *config) (*steps, error) {
	st := &steps{io: io, policy: policy}
	s, err := workflow.Open(ctx, io.js, io.names, io.log)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		io.log.InfoContext(ctx, "no workflows bucket: workflow steps will be dead-lettered (run spool-admin provision)",
			"bucket", io.names.WorkflowsBucket())
		return st, nil
	}
	if err != nil {
		return nil, err
	}
	st.wf = s
	return st, nil
}

// stepCtx bounds advancing a workflow: more than one write (a callback
// gathers the results of all its inputs), so up to half the task's
// AckWait, at least IOTimeout.
func (st *steps) stepCtx(a attemptInfo) (context.Context, context.CancelFunc) {
	return context.WithTimeout(st.io.ctx, max(st.io.ioTimeout, st.io.ackWait[a.p]/2))
}

// admit decides whether the handler of a workflow step runs; when it
// does not, the task is settled here. A plain task runs.
func (st *steps) admit(a *attemptInfo, _ spool.Meta) (bool, error) {
	ref, ok := workflow.RefOf(a.msg.Headers(), a.id)
	if !ok {
		return true, nil
	}
	return st.admitStep(a, ref)
}

// admitStep is admit for a workflow step; apart, a plain task does not
// allocate the step's reference.
func (st *steps) admitStep(a *attemptInfo, ref workflow.Ref) (bool, error) {
	if st.wf == nil {
		return false, fmt.Errorf("task %s is step %q of workflow %q, but the workflows bucket %q does not exist",
			a.id, ref.Step, ref.Workflow, st.io.names.WorkflowsBucket())
	}
	ctx, cancel := st.stepCtx(*a)
	defer cancel()
	act, o, err := st.wf.Begin(ctx, ref)
	if err != nil {
		st.io.log.Warn("reading workflow state before a step; the task will come back", "task_id", a.id, "workflow", ref.Workflow, "step", ref.Step, "error", err)
		st.io.nak(*a, st.policy.retryDelay(a.attempt))
		return false, nil
	}
	switch act {
	case workflow.Run:
		a.wf = &ref
		return true, nil
	case workflow.Drop:
		st.io.log.Info("dropping a stale workflow step task", "task_id", a.id, "workflow", ref.Workflow, "step", ref.Step)
		if err := a.msg.TermWithReason("stale workflow step"); err != nil {
			st.io.log.Warn("removing a stale workflow step task", "task_id", a.id, "error", err)
		}
		return false, nil
	}
	if err := st.wf.Finish(ctx, ref, o); err != nil {
		st.io.log.Warn("advancing a workflow; the task will come back", "task_id", a.id, "workflow", ref.Workflow, "step", ref.Step, "error", err)
		st.io.nak(*a, st.policy.retryDelay(a.attempt))
		return false, nil
	}
	if err := a.msg.Ack(); err != nil {
		st.io.log.Warn("acking a settled workflow step", "task_id", a.id, "error", err)
	}
	return false, nil
}

// finishStep advances the workflow of a step whose outcome is stored.
func (st *steps) finishStep(a attemptInfo, o workflow.Outcome) error {
	ctx, cancel := st.stepCtx(a)
	defer cancel()
	return st.wf.Finish(ctx, *a.wf, o)
}

// submitWorkflow handles the reserved type workflow.SubmitType: its
// payload is a workflow document. A document without an id takes the
// task's, so a redelivered submission completes the same workflow.
func (st *steps) submitWorkflow(ctx context.Context, t *Task) ([]byte, error) {
	doc, err := workflow.Decode(t.Payload)
	if err != nil {
		return nil, Permanent(err)
	}
	if doc.ID == "" {
		doc.ID = t.ID
	}
	id, err := st.wf.SubmitAgain(ctx, doc)
	if errors.Is(err, workflow.ErrInvalid) {
		return nil, Permanent(err)
	}
	if err != nil {
		return nil, err
	}
	return json.Marshal(map[string]string{"workflow_id": id})
}

// handler returns the handler of task t: the worker's own for the
// reserved workflow submission type, else h, the one the worker was given.
func (st *steps) handler(h Handler, t *Task) Handler {
	if t.Type == workflow.SubmitType && st.wf != nil {
		return HandlerFunc(st.submitWorkflow)
	}
	return h
}
