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

// errYield is the outcome of putFinal when the task was cancelled
// meanwhile: the finished document was not written.
var errYield = errors.New("the task was cancelled: its outcome yields")

// putCancelled stores the cancelled document doc unless the task's stored
// document is cancelled already: whoever changes the document to
// cancelled publishes the one cancelled event of the task (the canceller,
// or this worker when it writes first). The write is over the revision
// read, so a canceller writing meanwhile makes it read again.
func (s *settling) putCancelled(ctx context.Context, id string, doc spool.Result) error {
	var inFlight replicating
	tried, wrote := uint64(0), false
	for tries := 0; tries < maxFinalTries; {
		cur, rev, found, err := s.results.ReadFromLeader(ctx, id)
		if err != nil {
			return err
		}
		if wrote && rev == tried {
			// The last write lost to one still being replicated: read
			// again once that one may be applied.
			if err := inFlight.wait(ctx); err != nil {
				return err
			}
			continue
		}
		if found && cur.State == spool.StateCancelled {
			if sameFinal(cur, doc) {
				// An earlier try was stored and its answer lost, before
				// its event was published.
				s.results.Event(spool.EventCancelled, &doc)
			}
			return nil
		}
		tries++
		tried, wrote = rev, true
		err = s.results.PutAt(ctx, doc, rev)
		if err == nil || !results.IsConflict(err) {
			return err
		}
	}
	return fmt.Errorf("the result of task %s kept changing (%d writes lost a race)", id, maxFinalTries)
}

// maxFinalTries bounds putFinal's compare-and-set loop: the writes that
// lost to a change of the document, not those that lost to a write still
// being replicated (see replicating).
const maxFinalTries = 8

// replicating paces the tries of a compare-and-set write that lost to a
// write the stream has not applied yet. A replicated stream refuses a
// write conditional on a key's revision while an earlier write to that
// key is being replicated, and a read shows the key as it was until that
// write is applied: the revision read is the one the write lost on. A
// handler that reports progress and returns at once meets it, as does a
// processing state written just before the outcome. Trying again at once
// would lose again, so each wait doubles, from 1ms to 100ms, within the
// caller's deadline.
type replicating struct{ next time.Duration }

func (r *replicating) wait(ctx context.Context) error {
	r.next = min(max(2*r.next, time.Millisecond), 100*time.Millisecond)
	t := time.NewTimer(r.next)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return fmt.Errorf("waiting for a write still being replicated: %w", ctx.Err())
	case <-t.C:
		return nil
	}
}

// putFinal stores the document an attempt ends with (completed or dead,
// and the retrying or snoozed state a later attempt follows) over the
// revision of the task's result the attempt knows (a.rev), so that it
// never overwrites a cancellation stored meanwhile: the outcome of a task
// is decided by one writer. On a conflict it reads the document
// and the cancellation again: our own document already stored (an
// earlier try was stored but its answer lost) counts as stored; a task
// cancelled meanwhile (its cancelled document, or its cancellation, which
// Cancel stores before its document) gives errYield, nothing written;
// anything else (our own processing state, a stale document) is written
// over, at the revision read. The document is never recomputed.
//
// conflicted says a write over a.rev lost already (the pipeline's): the
// first step is then the read.
func (s *settling) putFinal(ctx context.Context, a attemptInfo, doc spool.Result, conflicted bool) error {
	rev := a.rev
	var inFlight replicating
	for tries := 0; tries < maxFinalTries; tries++ {
		if !conflicted {
			err := s.results.PutAt(ctx, doc, rev)
			if err == nil || !results.IsConflict(err) {
				return err
			}
		}
		conflicted = false
		cur, curRev, found, err := s.results.ReadFromLeader(ctx, a.id)
		if err != nil {
			return err
		}
		if curRev == rev && !(found && sameFinal(cur, doc)) {
			// The write lost to one still being replicated: the same
			// write, once that one is applied, reads it first.
			if err := inFlight.wait(ctx); err != nil {
				return err
			}
			tries--
			conflicted = true
			continue
		}
		if found && sameFinal(cur, doc) {
			return nil
		}
		if found && cur.State == spool.StateCancelled {
			return errYield
		}
		if found && ownProcessing(cur, doc) {
			// This attempt's processing state, written over the revision
			// it read: it replaced no cancellation, so a canceller either
			// has not written yet (and its write over what it read will
			// lose to this one or win over it) or wrote after it.
			rev = curRev
			continue
		}
		cancelled, err := s.cancels.stored(ctx, a.id)
		if err != nil {
			return err
		}
		if cancelled {
			return errYield
		}
		rev = curRev
	}
	return fmt.Errorf("the result of task %s kept changing (%d writes lost a race)", a.id, maxFinalTries)
}

// ownProcessing reports whether stored is the processing state of the
// attempt that finished with doc, as putProcessing writes it (without
// progress: a progress write is unconditional).
func ownProcessing(stored, doc spool.Result) bool {
	return stored.State == spool.StateProcessing && stored.Progress == nil &&
		stored.Attempts == doc.Attempts && stored.EnqueuedAt.Equal(doc.EnqueuedAt)
}

// sameFinal reports whether stored is the finished document doc (written
// by an earlier try of the same write).
func sameFinal(stored, doc spool.Result) bool {
	return stored.State == doc.State && stored.Attempts == doc.Attempts && stored.EnqueuedAt.Equal(doc.EnqueuedAt) &&
		stored.FinishedAt != nil && doc.FinishedAt != nil && stored.FinishedAt.Equal(*doc.FinishedAt)
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
