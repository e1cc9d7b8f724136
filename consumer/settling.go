package consumer

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/spoolq/spool/consumer/internal/results"
	spool "github.com/spoolq/spool/shared"
	"github.com/spoolq/spool/shared/workflow"
)

// settling is the last stage of an attempt: it acts on the handler's
// verdict. A completed task's result is stored and the task acked; a
// failed one is retried with backoff or dead-lettered; a snoozed one is
// handed back without counting the attempt; a cancelled one ends
// cancelled. Before the message is settled for good, the unique key is
// released and the features that held something for the attempt (a
// workflow step, a key's turn) pass it on.
type settling struct {
	io      *taskIO
	policy  *config // the retry policy and MaxRetries
	results *results.Store
	cancels *cancels
	pipe    *pipeline
	steps   stepFinisher
	turns   turnPasser
	// hard ends when the shutdown timeout runs out: a handler that
	// returns then is handed back, not failed.
	hard       context.Context
	maxDeliver [numPriorities]int
}

// settle acts on an attempt's result: ack, NAK with backoff, dead letter,
// or hand-back at shutdown.
func (s *settling) settle(ctx context.Context, a attemptInfo, r handlerResult, o outcome) {
	if s.cancels.cancelled(a.id) {
		s.settleCancelled(a, o)
		return
	}
	out, herr, v, reason := classify(s.hard, ctx, r)
	switch v {
	case verdictOK:
		o.completed = true
		s.complete(a, out, o)
	case verdictReturned:
		o.returned = true
		s.handBackUnfinished(&a, o)
	case verdictSnoozed:
		s.snooze(a, herr, o)
	case verdictDead:
		o.failed = true
		s.deadLetter(a, reason, herr, o)
	case verdictFailed:
		o.failed = true
		if a.attempt >= a.maxAttempts {
			s.deadLetter(a, reason, herr, o)
			return
		}
		s.retry(a, herr, o)
	}
}

// handBackUnfinished hands back a task whose handler shutdown ended, in
// state pending.
func (s *settling) handBackUnfinished(a *attemptInfo, o outcome) {
	doc := a.doc(spool.StatePending)
	doc.Error = "handed back unfinished at worker shutdown"
	if err := s.results.PutAsync(doc); err != nil {
		s.io.log.Warn("writing pending state", "task_id", a.id, "error", err)
	}
	if err := a.msg.Nak(); err != nil {
		s.io.log.Warn("handing back an unfinished task", "task_id", a.id, "error", err)
	}
	s.io.log.Info("task handed back at shutdown", "task_id", a.id, "type", a.typ, "priority", a.p.String())
	s.io.rec.record(a.p, a.typ, o)
}

// storedAlready settles a redelivered task whose completed or dead
// result is stored for this very message: its ack or term was lost. The
// stored outcome stands: a completed task is acked, a dead one terminated
// with its stored reason, and its unique key released either way. It
// reports false when the document is of another message under the same
// id (a task enqueued again, or replayed), which then runs.
func (s *settling) storedAlready(a attemptInfo, doc spool.Result) bool {
	if !a.sameMessage(doc) || doc.State != spool.StateCompleted && doc.State != spool.StateDead {
		return false
	}
	err := s.io.write(a, "releasing the unique key of task "+a.id, func(ctx context.Context) error {
		return s.results.ReleaseUnique(ctx, a.uniqueKey, a.id)
	})
	if err != nil {
		s.io.log.Warn("releasing unique key", "task_id", a.id, "unique_key", a.uniqueKey, "error", err)
	}
	if err := s.turns.passTurn(a); err != nil {
		s.io.log.Warn("passing the turn of a redelivered task whose outcome is stored; it will come back", "task_id", a.id, "state", doc.State, "error", err)
		s.io.nak(a, s.policy.retryDelay(a.attempt))
		return true
	}
	if doc.State == spool.StateDead {
		if err := a.msg.TermWithReason(string(doc.Reason)); err != nil {
			s.io.log.Warn("removing a redelivered task whose dead letter is stored", "task_id", a.id, "error", err)
		}
		s.io.log.Info("redelivered task was dead-lettered already; removed without running it", "task_id", a.id, "attempt", a.attempt, "reason", string(doc.Reason))
	} else {
		if err := a.msg.Ack(); err != nil {
			s.io.log.Warn("acking a redelivered task whose result is stored", "task_id", a.id, "error", err)
		}
		s.io.log.Info("redelivered task was completed already; acked without running it", "task_id", a.id, "attempt", a.attempt)
	}
	s.io.rec.recordAcked(a.p, a.typ)
	return true
}

// complete stores the completed result, releases the unique key and acks.
// The ack always comes after the result is stored: a crash before it
// redelivers the task, never loses its result.
//
// Without a unique key the write is pipelined (see pipeline): complete
// publishes the result document and returns, freeing the slot for the
// next task during the round trip; the task is acked when the bucket
// acknowledges the write, and NAKed for a retry when the write fails or
// its acknowledgement does not come within IOTimeout. A task with a unique
// key takes the synchronous path, since releasing its key needs the write
// first.
func (s *settling) complete(a attemptInfo, out []byte, o outcome) {
	doc := a.doc(spool.StateCompleted)
	if a.discard {
		// Only the marker is stored, and the event carries no output.
		doc.ResultDiscarded = true
	} else {
		doc.Result, doc.ResultEncoding = spool.ResultValue(out)
	}
	fin := time.Now()
	if a.uniqueKey == "" && a.wf == nil && a.order == nil {
		err := s.pipe.put(&a, o, &doc, fin)
		if err == nil {
			return
		}
		s.io.log.Warn("pipelined result write failed; writing it synchronously", "task_id", a.id, "error", err)
	}
	s.completeSync(&a, &doc, fin, o)
}

// completeSync stores the completed document, finished at fin, and then
// settles the task. Apart from complete, its frame is not on the stack of
// the pipelined completions, which take most of a runner's stack.
//
//go:noinline
func (s *settling) completeSync(ap *attemptInfo, docp *spool.Result, fin time.Time, o outcome) {
	a, doc := *ap, *docp
	// Only this path takes the finish time's address, so only it
	// allocates it.
	doc.FinishedAt = &fin
	yielded, err := s.writeOver(a, doc, "writing the result", o)
	if yielded {
		return
	}
	if err != nil {
		s.resultLost(a, o, err)
		return
	}
	if a.wf != nil {
		if err := s.steps.finishStep(a, workflow.Outcome{State: workflow.Completed}); err != nil {
			// The result is stored: the redelivery skips the handler and
			// advances the workflow again.
			s.io.log.Warn("advancing the workflow of a completed step; the task will come back", "task_id", a.id, "error", err)
			s.io.nak(a, s.policy.retryDelay(a.attempt))
			s.io.rec.record(a.p, a.typ, o)
			return
		}
	}
	err = s.io.write(a, "releasing the unique key of task "+a.id, func(ctx context.Context) error {
		return s.results.ReleaseUnique(ctx, a.uniqueKey, a.id)
	})
	if err != nil {
		s.io.log.Warn("releasing unique key", "task_id", a.id, "unique_key", a.uniqueKey, "error", err)
	}
	if err := s.turns.passTurn(a); err != nil {
		// The result is stored: the redelivery skips the handler and
		// passes the turn again.
		s.io.log.Warn("passing the turn of a completed task; the task will come back", "task_id", a.id, "error", err)
		s.io.nak(a, s.policy.retryDelay(a.attempt))
		s.io.rec.record(a.p, a.typ, o)
		return
	}
	if err := a.msg.Ack(); err != nil {
		s.io.log.Warn("acking completed task", "task_id", a.id, "error", err)
	}
	s.io.rec.record(a.p, a.typ, o)
}

// writeOver stores doc, the document the attempt ends with, over the
// revision the attempt knows (putFinal), retried through an election. A task
// cancelled meanwhile is settled as cancelled instead, and yielded says so:
// the attempt's own outcome is then not reported.
func (s *settling) writeOver(a attemptInfo, doc spool.Result, what string, o outcome) (yielded bool, err error) {
	err = s.io.write(a, what+" of task "+a.id, func(ctx context.Context) error {
		return s.putFinal(ctx, a, doc, false)
	})
	if errors.Is(err, errYield) {
		o.completed, o.failed = false, false
		s.settleCancelled(a, o)
		return true, nil
	}
	return false, err
}

// resultLost settles a completed attempt whose result could not be
// stored within its retry budget: without a stored result the task must
// run again. The handler did not fail: it counts as retried, not failed.
func (s *settling) resultLost(a attemptInfo, o outcome, err error) {
	s.io.log.Error("storing result failed; the task will be retried", "task_id", a.id, "error", err)
	o.completed, o.failed, o.retried = false, false, true
	s.io.nak(a, s.policy.retryDelay(a.attempt))
	s.io.rec.record(a.p, a.typ, o)
}

// retry records the retrying state and NAKs with the backoff delay.
func (s *settling) retry(a attemptInfo, herr error, o outcome) {
	delay := s.policy.nextDelay(a.typ, a.attempt, herr)
	next := time.Now().Add(delay)
	doc := a.doc(spool.StateRetrying)
	doc.Error = herr.Error()
	doc.NextAttempt = &next
	yielded, err := s.writeOver(a, doc, "writing the retrying state", o)
	if yielded {
		return
	}
	if err != nil {
		s.io.log.Warn("writing retrying state", "task_id", a.id, "error", err)
	}
	s.logFailure(a, herr, "task failed, will retry", "retry_in", delay)
	if a.order != nil && a.order.skip {
		if err := s.turns.passTurn(a); err != nil {
			s.io.log.Warn("passing the turn of a failed task; it keeps it until its retry", "task_id", a.id, "error", err)
		}
	}
	s.io.nak(a, delay)
	o.retried = true
	s.io.rec.record(a.p, a.typ, o)
}

func (s *settling) logFailure(a attemptInfo, herr error, msg string, attrs ...any) {
	attrs = append(attrs, "task_id", a.id, "type", a.typ, "priority", a.p.String(),
		"attempt", a.attempt, "max_attempts", a.maxAttempts, "error", herr)
	var pe *PanicError
	if errors.As(herr, &pe) {
		attrs = append(attrs, "stack", string(pe.Stack))
	}
	s.io.log.Warn(msg, attrs...)
}

// snooze hands the task back for a later run without counting the
// attempt: the snoozed document (one more snooze) is stored first, then
// the task is NAKed with the delay. A snooze that would need a delivery
// past the consumer's MaxDeliver dead-letters the task instead.
func (s *settling) snooze(a attemptInfo, herr error, o outcome) {
	var se *snoozeError
	errors.As(herr, &se)
	if md := s.maxDeliver[a.p]; md > 0 && a.attempt+a.snoozes >= md {
		o.failed = true
		s.deadLetter(a, spool.ReasonError, fmt.Errorf("snoozed past the consumer's max deliveries (%d)", md), o)
		return
	}
	next := time.Now().Add(se.Delay)
	doc := a.doc(spool.StateSnoozed)
	doc.Snoozes = a.snoozes + 1
	doc.NextAttempt = &next
	yielded, err := s.writeOver(a, doc, "writing the snoozed state", o)
	if yielded {
		return
	}
	if err != nil {
		s.io.log.Warn("writing snoozed state; the snooze will count as an attempt", "task_id", a.id, "error", err)
	}
	s.io.log.Debug("task snoozed", "task_id", a.id, "type", a.typ, "for", se.Delay, "snoozes", doc.Snoozes)
	s.io.nak(a, se.Delay)
	s.io.rec.record(a.p, a.typ, o)
}

// settleCancelled ends an attempt of a cancelled task: the cancelled
// result document (who and why from the cancellation) unless the
// canceller stored one already, the unique key released, and the task
// terminated: never retried, never dead-lettered.
func (s *settling) settleCancelled(a attemptInfo, o outcome) {
	ctx, cancel := context.WithTimeout(s.io.ctx, s.io.ioTimeout)
	c := s.cancels.get(ctx, a.id)
	cancel()
	doc := a.doc(spool.StateCancelled)
	fin := time.Now()
	doc.FinishedAt = &fin
	doc.CancelledBy, doc.CancelReason = c.By, c.Reason
	err := s.io.write(a, "writing the cancelled state of task "+a.id, func(ctx context.Context) error {
		return s.putCancelled(ctx, a.id, doc)
	})
	if err != nil {
		s.io.log.Warn("writing cancelled state", "task_id", a.id, "error", err)
	}
	err = s.io.write(a, "releasing the unique key of task "+a.id, func(ctx context.Context) error {
		return s.results.ReleaseUnique(ctx, a.uniqueKey, a.id)
	})
	if err != nil {
		s.io.log.Warn("releasing unique key", "task_id", a.id, "unique_key", a.uniqueKey, "error", err)
	}
	if a.wf != nil {
		// A workflow step that was cancelled on its own (or by
		// Client.CancelWorkflow while it ran) advances its workflow like
		// any other terminal step, before its task is removed.
		msg := "cancelled"
		if c.By != "" {
			msg += " by " + c.By
		}
		if c.Reason != "" {
			msg += ": " + c.Reason
		}
		err := s.io.write(a, "advancing the workflow of cancelled task "+a.id, func(context.Context) error {
			return s.steps.finishStep(a, workflow.Outcome{State: workflow.Cancelled, Error: msg})
		})
		if err != nil {
			// Left unacked: the task comes back and is settled again.
			s.io.log.Warn("advancing the workflow of a cancelled step; the task will come back", "task_id", a.id, "error", err)
			s.io.rec.record(a.p, a.typ, o)
			return
		}
	}
	if err := s.turns.passTurn(a); err != nil {
		// Left unacked: the task comes back and is settled again.
		s.io.log.Warn("passing the turn of a cancelled task; the task will come back", "task_id", a.id, "error", err)
		s.io.rec.record(a.p, a.typ, o)
		return
	}
	if err := a.msg.TermWithReason(spool.TermCancelled); err != nil {
		s.io.log.Warn("removing cancelled task", "task_id", a.id, "error", err)
	}
	s.io.log.Info("task cancelled", "task_id", a.id, "type", a.typ, "priority", a.p.String(), "by", c.By, "reason", c.Reason)
	s.io.rec.record(a.p, a.typ, o)
}

// cancelledNow reports whether a's task has a cancellation stored, read
// from the bucket when the local view has none; a failed read counts as
// none.
func (s *settling) cancelledNow(a attemptInfo) bool {
	ctx, cancel := context.WithTimeout(s.io.ctx, s.io.perTry)
	defer cancel()
	ok, err := s.cancels.stored(ctx, a.id)
	if err != nil {
		s.io.log.Warn("reading the cancellation of a failing task", "task_id", a.id, "error", err)
	}
	return ok
}

// finishConflicted settles a pipelined completion whose conditional result
// write lost a race (see putFinal): it is written again over the current
// revision and acked, or the task ends cancelled when it was cancelled
// meanwhile.
func (s *settling) finishConflicted(a attemptInfo, o outcome, doc spool.Result) {
	conflicted := true
	err := s.io.write(a, "writing the result of task "+a.id, func(ctx context.Context) error {
		err := s.putFinal(ctx, a, doc, conflicted)
		conflicted = false // a retry through an election writes first
		return err
	})
	switch {
	case errors.Is(err, errYield):
		o.completed = false
		s.settleCancelled(a, o)
	case err != nil:
		s.resultLost(a, o, err)
	default:
		if err := a.msg.Ack(); err != nil {
			s.io.log.Warn("acking completed task", "task_id", a.id, "error", err)
		}
		s.io.rec.record(a.p, a.typ, o)
	}
}
