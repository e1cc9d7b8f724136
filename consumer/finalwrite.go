package consumer

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/spoolq/spool/consumer/internal/results"
	spool "github.com/spoolq/spool/shared"
)

// The compare-and-set writes of a task's final document: the outcome of
// a task is decided by one writer, and a write that lost a race reads
// the document again rather than recomputing it.

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
