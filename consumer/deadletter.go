package consumer

import (
	"context"
	"errors"
	"time"

	spool "github.com/spoolq/spool/shared"
	"github.com/spoolq/spool/shared/workflow"
	"github.com/spoolq/spool/streams/dlq"
)

// deadLetter copies the task to the dead-letter stream, writes the dead
// result, releases the unique key and only then removes the original. If
// the copy cannot be stored the original stays and comes back after a
// backoff.
func (s *settling) deadLetter(a attemptInfo, reason spool.Reason, cause error, o outcome) {
	errText := ""
	if cause != nil {
		errText = cause.Error()
	}
	dm := dlq.Message{
		Subject:      a.msg.Subject(),
		Stream:       a.stream,
		Seq:          a.seq,
		Header:       a.msg.Headers(),
		Data:         a.msg.Data(),
		Reason:       reason,
		Err:          errText,
		Attempts:     a.attempt,
		FailedAt:     time.Now(),
		EnqueuedAt:   a.enq,
		HandedBackAt: a.handedBack,
		StartedAt:    a.started,
	}
	// A task cancelled meanwhile ends cancelled, not in the dead-letter
	// stream (putFinal below settles the race that remains).
	if s.cancelledNow(a) {
		o.failed = false
		s.settleCancelled(a, o)
		return
	}
	s.logFailure(a, cause, "task dead-lettered", "reason", string(reason))
	// The dead letter's Nats-Msg-Id (dlq.MsgID) makes a retried publish
	// store it once.
	err := s.io.write(a, "dead-lettering task "+a.id, func(ctx context.Context) error {
		return dlq.Publish(ctx, s.io.js, s.io.names, dm)
	})
	if err != nil {
		s.io.log.Error("dead-lettering failed; the task stays queued", "task_id", a.id, "error", err)
		s.io.nak(a, s.policy.retryDelay(a.attempt))
		o.retried = true
		s.io.rec.record(a.p, a.typ, o)
		return
	}
	err = s.io.write(a, "writing the dead result of task "+a.id, func(ctx context.Context) error {
		return s.putFinal(ctx, a, s.results.DeadDoc(dm), false)
	})
	if errors.Is(err, errYield) {
		// Cancelled between the check above and the write: the task ends
		// cancelled, as its canceller was told; its dead letter stays.
		s.io.log.Warn("task cancelled while it was dead-lettered: it ends cancelled, its dead letter stays in the DLQ", "task_id", a.id)
		o.failed = false
		s.settleCancelled(a, o)
		return
	}
	if err == nil {
		err = s.io.write(a, "releasing the unique key of task "+a.id, func(ctx context.Context) error {
			return s.results.ReleaseUnique(ctx, a.uniqueKey, a.id)
		})
	}
	if err != nil {
		s.io.log.Warn("writing dead result or releasing unique key", "task_id", a.id, "error", err)
	}
	if a.wf != nil {
		if err := s.steps.finishStep(a, workflow.Outcome{State: workflow.Failed, Error: errText, Reason: reason}); err != nil {
			// The dead result is stored: the redelivery skips the handler
			// and advances the workflow again.
			s.io.log.Warn("advancing the workflow of a failed step; the task will come back", "task_id", a.id, "error", err)
			s.io.nak(a, s.policy.retryDelay(a.attempt))
			o.retried = true
			s.io.rec.record(a.p, a.typ, o)
			return
		}
	}
	if err := s.turns.passTurn(a); err != nil {
		// The dead letter is stored (once, by its Nats-Msg-Id): the
		// redelivery dead-letters it again and passes the turn.
		s.io.log.Warn("passing the turn of a dead task; the task will come back", "task_id", a.id, "error", err)
		s.io.nak(a, s.policy.retryDelay(a.attempt))
		o.retried = true
		s.io.rec.record(a.p, a.typ, o)
		return
	}
	if err := a.msg.TermWithReason(string(reason)); err != nil {
		s.io.log.Warn("removing dead-lettered task", "task_id", a.id, "error", err)
	}
	o.dead = true
	s.io.rec.record(a.p, a.typ, o)
}
