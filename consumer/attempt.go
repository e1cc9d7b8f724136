package consumer

import (
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/spoolq/spool/consumer/flow"
	spool "github.com/spoolq/spool/shared"
	"github.com/spoolq/spool/shared/workflow"
)

// An attempt runs one delivery of a task through three stages, each in
// its own file: admission (admission.go) decides whether it runs now,
// running (running.go) calls the handler, settling (settling.go) acts on
// its verdict. Features plug into a stage through the small interfaces
// below and own their state: type pauses (typepause.go), workflow steps
// (workflow.go), flow control (flowcontrol.go) and cancellation
// (cancel.go).

// A gate is a feature's check in admission. run is false when the task
// does not run now: the gate has set it aside or settled it itself, or
// badInput says why it is to be dead-lettered as bad input.
type gate interface {
	admit(a *attemptInfo, meta spool.Meta) (run bool, badInput error)
}

// A stepFinisher advances the workflow of a step whose outcome is stored,
// before its message is settled for good.
type stepFinisher interface {
	finishStep(a attemptInfo, o workflow.Outcome) error
}

// A turnPasser passes on the key's turn an attempt held, before its
// message is settled for good (or, with OrderSkip, retried).
type turnPasser interface {
	passTurn(a attemptInfo) error
}

// attemptInfo is one attempt's record, handed from stage to stage.
type attemptInfo struct {
	msg         jetstream.Msg
	p           spool.Priority
	stream      string // the task partition's stream
	consumer    string // the consumer that delivered it
	seq         uint64
	attempt     int
	maxAttempts int
	id          string
	typ         string
	snoozes     int // deliveries that were snoozes, from the result document
	uniqueKey   string
	traceParent string
	// enq is when the task was first enqueued; handedBack, when the
	// message is a copy Spool published again, when the copy was.
	enq        time.Time
	handedBack *time.Time
	started    time.Time
	// startedAt points at a copy of started that every document of the
	// attempt shares: nothing changes it once the attempt starts.
	startedAt *time.Time
	// beat is when the task's AckWait clock last restarted as far as the
	// worker knows: its arrival, then each heartbeat. The next heartbeat
	// is timed from it at every stage (waiting for a slot, running,
	// waiting for room in the result pipeline), so no stage lets the clock
	// run longer than a heartbeat's interval.
	beat time.Time
	// discard: the task's completed result is not stored, only the
	// marker that it completed (see WithDiscardResults).
	discard bool
	// wf is the workflow step the task runs, nil for a plain task.
	wf *workflow.Ref
	// rev is the revision of the task's result document as the attempt
	// read it (0: none, or not read): its completed or dead document is
	// written over that revision only (see putFinal).
	rev uint64
	// order is the key turn the task holds, nil when none.
	order *orderRef
	// grants are the concurrency slots a task released from a waiting
	// room carries, until the limits gate takes them over; lease is what
	// the limits gate took for the run (nil: none).
	grants []flow.Grant
	lease  *flow.Lease
}

func (a attemptInfo) doc(state spool.State) spool.Result {
	d := spool.Result{
		ID:           a.id,
		Type:         a.typ,
		Priority:     a.p,
		State:        state,
		Attempts:     a.attempt,
		EnqueuedAt:   a.enq,
		HandedBackAt: a.handedBack,
		TraceParent:  a.traceParent,
		Snoozes:      a.snoozes,
	}
	switch {
	case a.startedAt != nil:
		d.StartedAt = a.startedAt
	case !a.started.IsZero():
		s := a.started
		d.StartedAt = &s
	}
	return d
}

// sameMessage reports whether doc was written for this very message: its
// enqueue time and, for a copy handed back, the copy's are the message's.
// A task enqueued again under the same id, replayed, or handed back again
// is another message.
func (a attemptInfo) sameMessage(doc spool.Result) bool {
	if !doc.EnqueuedAt.Equal(a.enq) || (doc.HandedBackAt == nil) != (a.handedBack == nil) {
		return false
	}
	return a.handedBack == nil || doc.HandedBackAt.Equal(*a.handedBack)
}
