package consumer

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/spoolq/spool/consumer/flow"
	"github.com/spoolq/spool/consumer/internal/results"
	spool "github.com/spoolq/spool/shared"
	"github.com/spoolq/spool/shared/jsproto"
)

// admission is the first stage of an attempt: it decodes the task, reads
// back a redelivered task's stored outcome, and asks the features' gates
// (type pause, workflow step, ordered keys and limits) whether the task
// runs now. A task that runs goes on to the running stage.
type admission struct {
	io      *taskIO
	tasks   jetstream.Stream // the task stream, where schedules live
	nc      *nats.Conn       // watches a redelivered task's result key
	policy  *config          // Names, MaxRetries, TaskTimeout, ProcessingDelay
	results *results.Store
	cancels *cancels
	flow    *flowControl // drops the slots a task carried but did not use
	// gates run in order; the first that refuses ends the attempt.
	gates      []gate
	run        *running
	settle     *settling
	maxDeliver [numPriorities]int
	// replicated is set when the task stream has replicas: only then can
	// a consumer's new leader redeliver a task a live worker still holds
	// (awaitOutcome).
	replicated bool
}

// attempt runs one delivery of a task in its slot and settles the message:
// ack, NAK with backoff, dead letter, or hand-back at shutdown. The caller
// (runner) frees the slot after. beat is when the task's AckWait clock
// last restarted (its arrival, or its last heartbeat while it waited for
// a slot): every heartbeat after is timed from it.
func (s *admission) attempt(lane int, msg jetstream.Msg, beat time.Time) {
	received := time.Now()
	if beat.IsZero() {
		beat = received
	}
	p := lanePriority(lane)

	md, err := msg.Metadata()
	if err != nil {
		// Not a JetStream delivery: nothing to settle.
		s.io.log.Error("task without JetStream metadata", "priority", p.String(), "subject", msg.Subject(), "error", err)
		return
	}
	hdr := msg.Headers()
	seq := md.Sequence.Stream
	a := attemptInfo{
		msg:      msg,
		p:        p,
		stream:   md.Stream,
		consumer: md.Consumer,
		seq:      seq,
		attempt:  int(md.NumDelivered),
		id:       s.policy.Names.TaskID(hdr, md.Stream, seq),
		beat:     beat,
	}
	a.enq, a.handedBack = spool.EnqueueTimes(hdr, md.Timestamp)
	_, typ, subjErr := s.policy.Names.ParseTaskSubject(msg.Subject())
	a.typ = typ
	if subjErr != nil {
		a.typ = "unknown"
	}
	meta, metaErr := spool.DecodeMeta(hdr)
	if sched := repeatingSched(s.policy.Names, hdr); sched != "" {
		if metaErr == nil && meta.ID != "" {
			a.id = meta.ID
		}
		s.refuseRepeating(a, sched)
		return
	}
	if err := errors.Join(subjErr, metaErr); err != nil {
		a.maxAttempts = a.attempt
		s.settle.deadLetter(a, spool.ReasonBadInput, err, outcome{failed: true, pickup: -1})
		return
	}
	if meta.ID != "" {
		a.id = meta.ID
	}
	a.discard = s.policy.discardsResult(meta.Result, typ, hdr)
	// A task handed back by a gate carries the attempts it used before
	// this message (see taskIO.handBack).
	a.attempt += meta.PriorAttempts
	// A task released from a waiting room carries the concurrency slots
	// it was handed, on its first delivery only: a redelivery's have
	// expired or were used. The limits gate takes them over, and every
	// way out before it hands them on.
	if md.NumDelivered == 1 {
		a.grants = flow.GrantsOf(hdr)
	}
	defer func() { s.flow.drop(a.grants) }()
	// A redelivery reads the task's result document once: deliveries that
	// were snoozes are not attempts (see Snooze), and a completed result
	// means the ack was lost (storedAlready).
	var prior *spool.Result
	if md.NumDelivered > 1 {
		prior, a.rev = s.priorResult(&a)
		// Only on a replicated stream, and only a task stored at least an
		// AckWait ago, can be redelivered while an earlier attempt still
		// holds it; a younger one was handed back (a NAK at a worker's
		// stop) and runs at once. On one server a redelivery means the
		// earlier worker went an AckWait without a heartbeat: waiting for
		// it would only spend deliveries of a task whose worker died. A
		// task whose result is discarded has no completed outcome to wait
		// for: it runs at once too.
		held := s.replicated && time.Since(md.Timestamp) >= s.io.ackWait[p]
		if held && !a.discard && (prior == nil || a.sameMessage(*prior) && prior.State == spool.StateProcessing) {
			prior, a.rev = s.awaitOutcome(&a, prior, a.rev)
		}
		if prior != nil && a.sameMessage(*prior) {
			a.snoozes = prior.Snoozes
			a.attempt = max(1, a.attempt-a.snoozes)
		}
	}
	retries := s.policy.MaxRetries
	if meta.MaxRetries != nil {
		retries = *meta.MaxRetries
	}
	a.maxAttempts = retries + 1
	if md := s.maxDeliver[p]; md > 0 && meta.PriorAttempts+md-a.snoozes < a.maxAttempts {
		a.maxAttempts = max(meta.PriorAttempts+md-a.snoozes, a.attempt)
	}
	if md := s.maxDeliver[p]; md > 0 && meta.PriorAttempts > 0 && a.attempt > md {
		s.exhausted(a, meta, prior, md)
		return
	}
	for _, g := range s.gates {
		run, bad := g.admit(&a, meta)
		if bad != nil {
			s.settle.deadLetter(a, spool.ReasonBadInput, bad, outcome{failed: true, pickup: -1})
		}
		if !run {
			return
		}
	}
	defer a.lease.Release(s.io.ctx)
	a.uniqueKey = meta.UniqueKey
	if prior != nil && s.settle.storedAlready(a, *prior) {
		return
	}
	if md.NumDelivered > 1 && (prior == nil || !slices.Contains([]spool.State{spool.StateRetrying, spool.StateSnoozed, spool.StateCancelled}, prior.State)) {
		s.logRerun(&a, prior)
	}
	timeout := s.policy.TaskTimeout
	if meta.Timeout > 0 {
		timeout = meta.Timeout
	}
	task := &Task{
		ID:          a.id,
		Type:        typ,
		Priority:    p,
		Payload:     msg.Data(),
		Headers:     hdr,
		Attempt:     a.attempt,
		MaxAttempts: a.maxAttempts,
		EnqueuedAt:  a.enq,

		names: &s.policy.Names,
		id:    a.id,
	}
	pickup := time.Duration(-1)
	if a.attempt == 1 {
		pickup = max(0, received.Sub(md.Timestamp))
	}
	a.traceParent = meta.TraceParent
	// A redelivery whose document says cancelled was cancelled while it
	// waited (the cancellation may not have reached this worker yet).
	if s.cancels.cancelled(a.id) || prior != nil && prior.State == spool.StateCancelled {
		s.settle.settleCancelled(a, outcome{pickup: -1})
		return
	}
	s.start(&a)
	s.run.run(&a, task, timeout, outcome{pickup: pickup})
}

// start marks the attempt started: its started event, and its processing
// state unless that waits for ProcessingDelay. Apart from attempt, its
// frame is not on the stack while the handler runs and the attempt
// settles.
//
//go:noinline
func (s *admission) start(a *attemptInfo) {
	// a is on the heap already (the gates take it by pointer): the
	// documents share its started.
	a.started = time.Now()
	a.startedAt = &a.started
	startedDoc := a.doc(spool.StateProcessing)
	s.results.Event(spool.EventStarted, &startedDoc)
	if s.policy.ProcessingDelay <= 0 {
		s.run.putProcessing(*a)
	}
}

// logRerun logs a redelivery that is not a retry, a snooze or a cancelled
// task (settled later): its earlier delivery never reached a stored
// outcome (it was lost, or its attempt is unfinished or unstored
// somewhere), or the document is of an earlier message under the same id.
// Logged, as the trace of a possible second run.
func (s *admission) logRerun(a *attemptInfo, prior *spool.Result) {
	state, enq := "none", time.Time{}
	if prior != nil {
		state, enq = string(prior.State), prior.EnqueuedAt
	}
	s.io.log.Info("redelivered task has no stored outcome; running it", "task_id", a.id, "attempt", a.attempt,
		"stored_state", state, "stored_enqueued_at", enq, "enqueued_at", a.enq)
}

// priorResult reads the result document of a redelivered task from the
// bucket's leader (a lagging replica could miss it), retried through an
// election for as long as a completion's result write is (3/4 of the
// AckWait, see pipeline.retryBudget), the task heartbeated meanwhile so
// it stays ours; nil when there is none or the read still fails. A read
// given up early runs again a task whose result is stored (its ack was
// lost in the election), and elections under load stall a cluster for
// seconds. rev is the document's revision (0 when unknown).
func (s *admission) priorResult(a *attemptInfo) (*spool.Result, uint64) {
	ctx, cancel := context.WithTimeout(s.io.ctx, s.io.retryBudget(a.p))
	defer cancel()
	stopBeats := beatWhile(ctx, *a, s.io.ackWait[a.p]/4, s.io.log, "a redelivered task")
	defer func() { a.beat = stopBeats() }()
	var doc spool.Result
	var rev uint64
	found := false
	err := jsproto.Tries{PerTry: s.io.perTry}.Do(ctx, "reading the result of task "+a.id, func(ctx context.Context) (err error) {
		doc, rev, found, err = s.results.ReadFromLeader(ctx, a.id)
		return err
	})
	if err != nil {
		s.io.log.Warn("reading the stored result of a redelivered task failed; running it", "task_id", a.id, "error", err)
		return nil, 0
	}
	if !found {
		return nil, rev
	}
	return &doc, rev
}

// awaitOutcome gives the earlier attempt of a redelivered task that has
// no stored outcome (prior, at revision rev) a quarter of the AckWait to
// store one before this delivery runs, heartbeating the task meanwhile.
// A consumer whose leader changes redelivers at once the tasks its new
// leader finds overdue, some of them still held by a live worker whose
// heartbeat had not reached the consumer's replicas: that worker stores
// their outcome in a moment, and this delivery is then settled without
// running (storedAlready). It returns the document as last read.
func (s *admission) awaitOutcome(a *attemptInfo, prior *spool.Result, rev uint64) (*spool.Result, uint64) {
	grace := s.io.ackWait[a.p] / 4
	if grace <= 0 {
		return prior, rev
	}
	written := make(chan struct{}, 1)
	sub, err := s.nc.Subscribe(s.results.Subject(a.id), func(*nats.Msg) {
		select {
		case written <- struct{}{}:
		default:
		}
	})
	if err != nil {
		s.io.log.Warn("watching the result of a redelivered task failed; running it", "task_id", a.id, "error", err)
		return prior, rev
	}
	defer func() { _ = sub.Unsubscribe() }()
	ctx, cancel := context.WithTimeout(s.io.ctx, grace)
	defer cancel()
	stop := beatWhile(ctx, *a, grace, s.io.log, "a redelivered task")
	defer func() { a.beat = stop() }()
	for {
		select {
		case <-written:
		case <-ctx.Done():
			// A write between the first read and the subscription is
			// seen by this last read.
			return s.priorResult(a)
		}
		doc, docRev := s.priorResult(a)
		if doc != nil && (!a.sameMessage(*doc) || doc.State != spool.StateProcessing) {
			return doc, docRev
		}
	}
}

// exhausted dead-letters a handed-back task delivered after as many
// deliveries without a verdict as max deliver allows, counted across its
// copies (Spool-Prior-Attempts): a task that kills its worker on every
// attempt is handed back by a rate limit with a fresh count of
// deliveries, which would never reach max deliver, so the attempts it
// carries stop it, as max deliver stops a task never handed back. A
// result stored for this message already (its ack was lost) stands
// instead.
func (s *admission) exhausted(a attemptInfo, meta spool.Meta, prior *spool.Result, md int) {
	a.uniqueKey = meta.UniqueKey
	if prior != nil && s.settle.storedAlready(a, *prior) {
		return
	}
	a.attempt = md
	err := fmt.Errorf("deliveries exhausted without a verdict (worker crashed or timed out %d times)", md)
	s.settle.deadLetter(a, spool.ReasonMaxDeliver, err, outcome{failed: true, pickup: -1})
}
