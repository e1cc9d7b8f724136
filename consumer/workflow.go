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

// Workflows: a step's task is a task with the workflow headers
// (workflow.HeaderWorkflow, workflow.HeaderStep). Before its handler runs,
// the worker asks the workflow store whether to run it (beginStep); after
// its final outcome is stored (completed result, or dead letter) and
// before the task is acked, it advances the workflow (finishStep). A
// crash between the two leaves the task unacked: its redelivery finds the
// outcome stored, skips the handler and advances again, idempotently.

// bindWorkflows opens the workflows bucket; a deployment provisioned
// before workflows existed has none, and then step tasks are
// dead-lettered as bad input.
func (w *Worker) bindWorkflows(ctx context.Context) error {
	s, err := workflow.Open(ctx, w.js, w.o.Names, w.log)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		w.log.InfoContext(ctx, "no workflows bucket: workflow steps will be dead-lettered (run spool-admin provision)",
			"bucket", w.o.Names.WorkflowsBucket())
		return nil
	}
	if err != nil {
		return err
	}
	w.wf = s
	return nil
}

// stepCtx bounds advancing a workflow: more than one write (a callback
// gathers the results of all its inputs), so up to half the task's
// AckWait, at least IOTimeout.
func (w *Worker) stepCtx(a attemptInfo) (context.Context, context.CancelFunc) {
	return context.WithTimeout(w.ioCtx, max(w.o.IOTimeout, w.ackWait[a.p]/2))
}

// beginStep decides whether the handler of a workflow step runs; when it
// does not, the task is settled here. It reports whether to run.
func (w *Worker) beginStep(a *attemptInfo, ref workflow.Ref) bool {
	if w.wf == nil {
		w.deadLetter(*a, spool.ReasonBadInput, fmt.Errorf("task %s is step %q of workflow %q, but the workflows bucket %q does not exist",
			a.id, ref.Step, ref.Workflow, w.o.Names.WorkflowsBucket()), outcome{failed: true, pickup: -1})
		return false
	}
	ctx, cancel := w.stepCtx(*a)
	defer cancel()
	act, o, err := w.wf.Begin(ctx, ref)
	if err != nil {
		w.log.Warn("reading workflow state before a step; the task will come back", "task_id", a.id, "workflow", ref.Workflow, "step", ref.Step, "error", err)
		w.nak(*a, w.o.retryDelay(a.attempt))
		return false
	}
	switch act {
	case workflow.Run:
		a.wf = &ref
		return true
	case workflow.Drop:
		w.log.Info("dropping a stale workflow step task", "task_id", a.id, "workflow", ref.Workflow, "step", ref.Step)
		if err := a.msg.TermWithReason("stale workflow step"); err != nil {
			w.log.Warn("removing a stale workflow step task", "task_id", a.id, "error", err)
		}
		return false
	}
	if err := w.wf.Finish(ctx, ref, o); err != nil {
		w.log.Warn("advancing a workflow; the task will come back", "task_id", a.id, "workflow", ref.Workflow, "step", ref.Step, "error", err)
		w.nak(*a, w.o.retryDelay(a.attempt))
		return false
	}
	if err := a.msg.Ack(); err != nil {
		w.log.Warn("acking a settled workflow step", "task_id", a.id, "error", err)
	}
	return false
}

// finishStep advances the workflow of a step whose outcome is stored.
func (w *Worker) finishStep(a attemptInfo, o workflow.Outcome) error {
	ctx, cancel := w.stepCtx(a)
	defer cancel()
	return w.wf.Finish(ctx, *a.wf, o)
}

// submitWorkflow handles the reserved type workflow.SubmitType: its
// payload is a workflow document. A document without an id takes the
// task's, so a redelivered submission completes the same workflow.
func (w *Worker) submitWorkflow(ctx context.Context, t *Task) ([]byte, error) {
	doc, err := workflow.Decode(t.Payload)
	if err != nil {
		return nil, Permanent(err)
	}
	if doc.ID == "" {
		doc.ID = t.ID
	}
	id, err := w.wf.SubmitAgain(ctx, doc)
	if errors.Is(err, workflow.ErrInvalid) {
		return nil, Permanent(err)
	}
	if err != nil {
		return nil, err
	}
	return json.Marshal(map[string]string{"workflow_id": id})
}

// handlerFor returns the handler of a task: the worker's own for the
// reserved workflow submission type, else the one the worker was given.
func (w *Worker) handlerFor(t *Task) Handler {
	if t.Type == workflow.SubmitType && w.wf != nil {
		return HandlerFunc(w.submitWorkflow)
	}
	return w.h
}
