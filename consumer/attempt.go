package consumer

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/spoolq/spool/consumer/flow"
	spool "github.com/spoolq/spool/shared"
	"github.com/spoolq/spool/shared/jsproto"
	"github.com/spoolq/spool/shared/workflow"
	"github.com/spoolq/spool/streams/dlq"
)

// verdict is how an attempt ended.
type verdict int

const (
	verdictOK       verdict = iota // the handler succeeded
	verdictFailed                  // an error: retry while attempts remain
	verdictDead                    // dead-letter at once (permanent, no handler, bad input)
	verdictReturned                // shutdown: hand the task back unfinished
	verdictSnoozed                 // run again later without counting the attempt
)

// attempt runs one delivery of a task in its slot and settles the message:
// ack, NAK with backoff, dead letter, or hand-back at shutdown. The caller
// (runner) frees the slot after.
func (w *Worker) attempt(lane int, msg jetstream.Msg) {
	defer w.attempts.Done()
	received := time.Now()
	p := lanePriority(lane)

	md, err := msg.Metadata()
	if err != nil {
		// Not a JetStream delivery: nothing to settle.
		w.log.Error("task without JetStream metadata", "priority", p.String(), "subject", msg.Subject(), "error", err)
		return
	}
	hdr := msg.Headers()
	seq := md.Sequence.Stream
	a := attemptInfo{
		msg:     msg,
		p:       p,
		stream:  md.Stream,
		seq:     seq,
		attempt: int(md.NumDelivered),
		id:      spool.TaskID(hdr, seq),
	}
	a.enq, a.handedBack = spool.EnqueueTimes(hdr, md.Timestamp)
	_, typ, subjErr := w.o.Names.ParseTaskSubject(msg.Subject())
	a.typ = typ
	if subjErr != nil {
		a.typ = "unknown"
	}
	meta, metaErr := spool.DecodeMeta(hdr)
	if err := errors.Join(subjErr, metaErr); err != nil {
		a.maxAttempts = a.attempt
		w.deadLetter(a, spool.ReasonBadInput, err, outcome{failed: true, pickup: -1})
		return
	}
	if meta.ID != "" {
		a.id = meta.ID
	}
	// A task handed back for flow control carries the attempts it used
	// before this message (see deferTask).
	a.attempt += meta.PriorAttempts
	// A task released from a waiting room carries the concurrency slots
	// it was handed (only its first delivery: a redelivery's have expired
	// or were used); admitFlow takes them over, and every way out before
	// it hands them on.
	var grants []flow.Grant
	if md.NumDelivered == 1 {
		grants = flow.GrantsOf(hdr)
	}
	defer func() { w.flow.Drop(w.ioCtx, grants...) }()
	// A redelivery reads the task's result document once: deliveries that
	// were snoozes are not attempts (see Snooze), and a completed result
	// means the ack was lost (storedAlready).
	var prior *spool.Result
	if md.NumDelivered > 1 {
		prior, a.rev = w.priorResult(a)
		if prior != nil && a.sameMessage(*prior) {
			a.snoozes = prior.Snoozes
			a.attempt = max(1, a.attempt-a.snoozes)
		}
	}
	// A task of a paused type is parked, unrun and uncounted, unless it
	// was cancelled: that settles it at once, below.
	if w.parking.Paused(a.typ) && !w.cancels.cancelled(a.id) {
		w.park(a, meta)
		return
	}
	if ref, ok := workflow.RefOf(hdr, a.id); ok && !w.beginStep(&a, ref) {
		return
	}
	retries := w.o.MaxRetries
	if meta.MaxRetries != nil {
		retries = *meta.MaxRetries
	}
	a.maxAttempts = retries + 1
	if md := w.maxDeliver[p]; md > 0 && meta.PriorAttempts+md-a.snoozes < a.maxAttempts {
		a.maxAttempts = max(meta.PriorAttempts+md-a.snoozes, a.attempt)
	}
	if !w.admitOrder(&a, meta) {
		return
	}
	lease, admitted := w.admitFlow(a, meta, &grants)
	if !admitted {
		return
	}
	defer lease.Release(w.ioCtx)
	a.uniqueKey = meta.UniqueKey
	if prior != nil && w.storedAlready(a, *prior) {
		return
	}
	if md.NumDelivered > 1 && (prior == nil || !slices.Contains([]spool.State{spool.StateRetrying, spool.StateSnoozed, spool.StateCancelled}, prior.State)) {
		// A redelivery that is not a retry, a snooze or a cancelled task
		// (settled below): its earlier delivery never reached a stored
		// outcome (it was lost, or its attempt is unfinished or unstored
		// somewhere), or the document is of an earlier message under the
		// same id. Logged, as the trace of a possible second run.
		state, enq := "none", time.Time{}
		if prior != nil {
			state, enq = string(prior.State), prior.EnqueuedAt
		}
		w.log.Info("redelivered task has no stored outcome; running it", "task_id", a.id, "attempt", a.attempt,
			"stored_state", state, "stored_enqueued_at", enq, "enqueued_at", a.enq)
	}
	timeout := w.o.TaskTimeout
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

		names: &w.o.Names,
		id:    a.id,
	}
	pickup := time.Duration(-1)
	if a.attempt == 1 {
		pickup = max(0, received.Sub(md.Timestamp))
	}
	a.traceParent = meta.TraceParent
	// A redelivery whose document says cancelled was cancelled while it
	// waited (the cancellation may not have reached this worker yet).
	if w.cancels.cancelled(a.id) || prior != nil && prior.State == spool.StateCancelled {
		w.settleCancelled(a, outcome{pickup: -1})
		return
	}
	a.started = time.Now()
	started := a.doc(spool.StateProcessing)
	w.results.Event(spool.EventStarted, &started)
	if w.o.ProcessingDelay <= 0 {
		w.putProcessing(a)
	}
	w.run(a, task, timeout, outcome{pickup: pickup})
}

// storedAlready settles a redelivered task whose final result is stored
// already: an attempt finished, its completed or dead result was stored
// (the dead letter before it), and the ack or term that follows was lost (a
// consumer leader change, a connection lost after the write, a worker
// killed in between). The outcome stands as it was stored, never
// recomputed: a completed task is acked, a dead one is terminated with its
// stored reason, and in both cases its unique key is released (a no-op
// when that was done already). Running it again would compute a second
// outcome: a dead task that then succeeds would be completed with its dead
// letter left in the DLQ. The document must be of this very message (its
// enqueue time is the message's), so a task enqueued again under the same
// id, or replayed, still runs. Only redeliveries pay the read, from the
// bucket's leader (see priorResult); a read that fails runs the task.
func (w *Worker) storedAlready(a attemptInfo, doc spool.Result) bool {
	if !a.sameMessage(doc) || doc.State != spool.StateCompleted && doc.State != spool.StateDead {
		return false
	}
	err := w.settleWrite(a, "releasing the unique key of task "+a.id, func(ctx context.Context) error {
		return w.results.ReleaseUnique(ctx, a.uniqueKey, a.id)
	})
	if err != nil {
		w.log.Warn("releasing unique key", "task_id", a.id, "unique_key", a.uniqueKey, "error", err)
	}
	if err := w.finishOrder(a); err != nil {
		w.log.Warn("passing the turn of a redelivered task whose outcome is stored; it will come back", "task_id", a.id, "state", doc.State, "error", err)
		w.nak(a, w.o.retryDelay(a.attempt))
		return true
	}
	if doc.State == spool.StateDead {
		if err := a.msg.TermWithReason(string(doc.Reason)); err != nil {
			w.log.Warn("removing a redelivered task whose dead letter is stored", "task_id", a.id, "error", err)
		}
		w.log.Info("redelivered task was dead-lettered already; removed without running it", "task_id", a.id, "attempt", a.attempt, "reason", string(doc.Reason))
	} else {
		if err := a.msg.Ack(); err != nil {
			w.log.Warn("acking a redelivered task whose result is stored", "task_id", a.id, "error", err)
		}
		w.log.Info("redelivered task was completed already; acked without running it", "task_id", a.id, "attempt", a.attempt)
	}
	w.rec.recordAcked(a.p, a.typ)
	return true
}

// priorResult reads the result document of a redelivered task from the
// bucket's leader (a lagging replica could miss it), retried through an
// election for as long as a completion's result write is (3/4 of the
// AckWait, see pipeline.retryBudget), the task heartbeated meanwhile so
// it stays ours; nil when there is none or the read still fails. A read
// given up early runs again a task whose result is stored (its ack was
// lost in the election), and elections under load stall a cluster for
// seconds. rev is the document's revision (0 when unknown).
func (w *Worker) priorResult(a attemptInfo) (*spool.Result, uint64) {
	ctx, cancel := context.WithTimeout(w.ioCtx, w.pipe.retryBudget(a.p))
	defer cancel()
	stopBeats := w.beatWhile(ctx, a)
	defer stopBeats()
	var doc spool.Result
	var rev uint64
	found := false
	err := jsproto.Retry{PerTry: w.pipe.timeout}.Do(ctx, "reading the result of task "+a.id, func(ctx context.Context) (err error) {
		doc, rev, found, err = w.results.ReadFromLeader(ctx, a.id)
		return err
	})
	if err != nil {
		w.log.Warn("reading the stored result of a redelivered task failed; running it", "task_id", a.id, "error", err)
		return nil, 0
	}
	if !found {
		return nil, rev
	}
	return &doc, rev
}

// beatWhile heartbeats a's task every quarter of its AckWait until ctx
// ends or the returned stop is called.
func (w *Worker) beatWhile(ctx context.Context, a attemptInfo) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		every := w.ackWait[a.p] / 4
		if every <= 0 {
			every = time.Second // AckWait unknown
		}
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				if err := a.msg.InProgress(); err != nil {
					w.log.Warn("heartbeat of a redelivered task failed", "task_id", a.id, "error", err)
				}
			}
		}
	}()
	return func() { cancel(); <-done }
}

// putProcessing writes the processing state over the revision the attempt
// read, so it never overwrites a cancellation (see putFinal).
func (w *Worker) putProcessing(a attemptInfo) {
	if err := w.results.PutUnackedAt(a.doc(spool.StateProcessing), a.rev); err != nil {
		w.log.Warn("writing processing state", "task_id", a.id, "error", err)
	}
}

// attemptInfo is what settling an attempt needs.
type attemptInfo struct {
	msg         jetstream.Msg
	p           spool.Priority
	stream      string // the task partition's stream
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
	// wf is the workflow step the task runs, nil for a plain task.
	wf *workflow.Ref
	// rev is the revision of the task's result document as the attempt
	// read it (0: none, or not read): its completed or dead document is
	// written over that revision only (see putFinal).
	rev uint64
	// order is the key turn the task holds, nil when none.
	order *orderRef
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
	if !a.started.IsZero() {
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

// handlerResult is what the handler returned.
type handlerResult struct {
	out []byte
	err error
}

// handlerGrace is how long a handler whose context ended gets to return on
// its own before the attempt is settled without it.
const handlerGrace = 50 * time.Millisecond

// run calls the handler in the attempt's goroutine under the attempt's
// deadline, turning a panic into a *PanicError, and settles the attempt
// with its result. A watch (one timer, no goroutine unless it fires)
// heartbeats the message while the handler runs, writes the processing
// state after ProcessingDelay, and settles the attempt without the handler
// when it has not returned handlerGrace after its deadline or after
// shutdown cancelled it (timeout, or hand-back); the slot then stays busy
// until the handler returns.
func (w *Worker) run(a attemptInfo, t *Task, timeout time.Duration, o outcome) {
	// The attempt's contexts hang off handlerBase (hardCtx's values, no
	// cancellation): deriving them from hardCtx itself registered every
	// attempt in hardCtx under its one lock, which all runners contended
	// for. Shutdown reaches them through the watches (endHandlers).
	ctx, cancel := context.WithTimeout(w.handlerBase, timeout)
	defer cancel()
	ctx, cancelTask := context.WithCancelCause(ctx)
	defer cancelTask(nil)
	wa := w.startWatch(ctx, cancelTask, a, o)
	t.progress = wa.progress
	w.cancels.track(a.id, wa)
	defer w.cancels.untrack(a.id, wa)
	var r handlerResult
	func() {
		defer func() {
			if v := recover(); v != nil {
				r = handlerResult{err: &PanicError{Value: v, Stack: debug.Stack()}}
			}
		}()
		r.out, r.err = w.handlerFor(t).ProcessTask(ctx, t)
	}()
	// A no-op when the watch settled the attempt already; waits for it
	// when it is settling it now.
	wa.finish(r)
}

// watch is the timer of a running attempt: it sends InProgress every
// AckWait/3, writes the processing state once the attempt has run for
// ProcessingDelay (when that is not 0, in which case the attempt wrote it
// as it started), and settles the attempt when its handler overstays (see
// run). Nothing it would still do happens once the attempt is settled, so
// a late processing write cannot overwrite the final state.
type watch struct {
	w   *Worker
	ctx context.Context
	// cancel ends ctx with ErrCancelled when the task is cancelled.
	cancel context.CancelCauseFunc
	a      attemptInfo
	o      outcome
	every  time.Duration
	once   sync.Once

	mu           sync.Mutex
	stopped      bool
	nextBeat     time.Time
	processingAt time.Time // zero once written or not wanted
	expireAt     time.Time // the deadline plus handlerGrace
	timer        *time.Timer

	// sameTask is the next running attempt of the same task in the
	// cancellation registry (cancels.running); guarded by its lock.
	sameTask *watch
}

func (w *Worker) startWatch(ctx context.Context, cancel context.CancelCauseFunc, a attemptInfo, o outcome) *watch {
	every := w.ackWait[a.p] / 3
	if every <= 0 {
		every = 10 * time.Second
	}
	h := &watch{w: w, ctx: ctx, cancel: cancel, a: a, o: o, every: every, nextBeat: a.started.Add(every)}
	if d := w.o.ProcessingDelay; d > 0 {
		h.processingAt = a.started.Add(d)
	}
	if dl, ok := ctx.Deadline(); ok {
		h.expireAt = dl.Add(handlerGrace)
	}
	h.mu.Lock() // the first firing waits until timer is set
	h.timer = time.AfterFunc(time.Until(h.nextFiringLocked()), h.fire)
	h.mu.Unlock()
	// Registered before looking at hardCtx: cancelHandlers cancels it
	// before it visits the registry, so an attempt either is visited or
	// sees the cancellation here.
	w.watchMu.Lock()
	w.watches[h] = struct{}{}
	w.watchMu.Unlock()
	if w.hardCtx.Err() != nil {
		h.cancel(context.Cause(w.hardCtx))
		h.expireSoon()
	}
	return h
}

// nextFiringLocked is the earliest of the next heartbeat, the processing
// write and the expiry. h.mu is held.
func (h *watch) nextFiringLocked() time.Time {
	next := h.nextBeat
	for _, t := range []time.Time{h.processingAt, h.expireAt} {
		if !t.IsZero() && t.Before(next) {
			next = t
		}
	}
	return next
}

func (h *watch) fire() {
	h.mu.Lock()
	if h.stopped {
		h.mu.Unlock()
		return
	}
	now := time.Now()
	if !h.expireAt.IsZero() && !now.Before(h.expireAt) {
		h.mu.Unlock()
		// Past the deadline, the context's own timer may not have run yet
		// on a loaded machine (both timers are due): the attempt timed out
		// all the same, and must never settle as a success.
		err := h.ctx.Err()
		if err == nil {
			err = context.DeadlineExceeded
		}
		h.w.log.Warn("handler still running after its context ended; settling the task now, the slot stays busy until the handler returns",
			"task_id", h.a.id, "type", h.a.typ, "error", err)
		h.finish(handlerResult{err: err})
		return
	}
	if !h.processingAt.IsZero() && !now.Before(h.processingAt) {
		h.processingAt = time.Time{}
		h.w.putProcessing(h.a)
	}
	if !now.Before(h.nextBeat) {
		if err := h.a.msg.InProgress(); err != nil {
			h.w.log.Warn("heartbeat failed", "task_id", h.a.id, "error", err)
		}
		h.nextBeat = now.Add(h.every)
	}
	h.timer.Reset(time.Until(h.nextFiringLocked()))
	h.mu.Unlock()
}

// expireSoon gives the handler handlerGrace from now to return (its
// context was cancelled by shutdown).
func (h *watch) expireSoon() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.stopped {
		return
	}
	h.expireAt = time.Now().Add(handlerGrace)
	h.timer.Reset(handlerGrace)
}

// progress records the handler's progress: the processing document with
// it, and the progress event. Under h.mu, so nothing is written once the
// attempt is settled (a late write would overwrite the final state).
func (h *watch) progress(p spool.Progress) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.stopped {
		return fmt.Errorf("%w: task %s", ErrSettled, h.a.id)
	}
	p.At = time.Now().UTC()
	doc := h.a.doc(spool.StateProcessing)
	doc.Progress = &p
	h.processingAt = time.Time{} // the processing state is written now
	if err := h.w.results.PutUnacked(doc); err != nil {
		return err
	}
	h.w.results.Event(spool.EventProgress, &doc)
	return nil
}

// cancelTask cancels the handler's context because its task was
// cancelled, and gives the handler handlerGrace to return.
func (h *watch) cancelTask() {
	h.cancel(ErrCancelled)
	h.expireSoon()
}

// finish settles the attempt with r, once: the first caller (the handler
// returning, or the watch expiring) wins and the other waits for it.
func (h *watch) finish(r handlerResult) {
	h.once.Do(func() {
		h.stop()
		o := h.o
		o.run = time.Since(h.a.started)
		h.w.settle(h.ctx, h.a, r, o)
	})
}

// stop ends the timer; nothing is sent after it returns.
func (h *watch) stop() {
	h.mu.Lock()
	h.stopped = true
	h.timer.Stop()
	h.mu.Unlock()
	h.w.watchMu.Lock()
	delete(h.w.watches, h)
	h.w.watchMu.Unlock()
}

// cancelHandlers cancels every handler's context and gives the handlers
// handlerGrace to return before their attempts are settled without them.
func (w *Worker) cancelHandlers() {
	w.hardCancel()
	w.endHandlers(context.Cause(w.hardCtx))
}

// endHandlers cancels the context of every running attempt with cause
// (hardCtx's) and gives it handlerGrace. It runs once hardCtx ends,
// whatever ended it (cancelHandlers, or its parent: see Start); an attempt
// whose watch registers later sees hardCtx ended in startWatch.
func (w *Worker) endHandlers(cause error) {
	w.watchMu.Lock()
	defer w.watchMu.Unlock()
	for h := range w.watches {
		h.cancel(cause)
		h.expireSoon()
	}
}

// settle acts on an attempt's result: ack, NAK with backoff, dead letter,
// or hand-back at shutdown.
func (w *Worker) settle(ctx context.Context, a attemptInfo, r handlerResult, o outcome) {
	if w.cancels.cancelled(a.id) {
		w.settleCancelled(a, o)
		return
	}
	out, herr, v, reason := classify(w.hardCtx, ctx, r)
	switch v {
	case verdictOK:
		o.completed = true
		w.complete(a, out, o)
	case verdictReturned:
		o.returned = true
		doc := a.doc(spool.StatePending)
		doc.Error = "handed back unfinished at worker shutdown"
		if err := w.results.PutAsync(doc); err != nil {
			w.log.Warn("writing pending state", "task_id", a.id, "error", err)
		}
		if err := a.msg.Nak(); err != nil {
			w.log.Warn("handing back an unfinished task", "task_id", a.id, "error", err)
		}
		w.log.Info("task handed back at shutdown", "task_id", a.id, "type", a.typ, "priority", a.p.String())
		w.rec.record(a.p, a.typ, o)
	case verdictSnoozed:
		w.snooze(a, herr, o)
	case verdictDead:
		o.failed = true
		w.deadLetter(a, reason, herr, o)
	case verdictFailed:
		o.failed = true
		if a.attempt >= a.maxAttempts {
			w.deadLetter(a, reason, herr, o)
			return
		}
		w.retry(a, herr, o)
	}
}

// classify maps the handler's return to a verdict and a dead-letter reason.
func classify(hard, attemptCtx context.Context, r handlerResult) ([]byte, error, verdict, spool.Reason) {
	if r.err == nil {
		return r.out, nil, verdictOK, ""
	}
	var pe *PanicError
	var se *snoozeError
	switch {
	case errors.As(r.err, &se) && hard.Err() == nil:
		return nil, r.err, verdictSnoozed, ""
	case errors.As(r.err, &pe):
		return nil, r.err, verdictFailed, spool.ReasonPanic
	case errors.Is(r.err, ErrNoHandler):
		return nil, r.err, verdictDead, spool.ReasonNoHandler
	case IsPermanent(r.err):
		return nil, r.err, verdictDead, spool.ReasonPermanent
	case hard.Err() != nil:
		return nil, r.err, verdictReturned, ""
	case errors.Is(attemptCtx.Err(), context.DeadlineExceeded) || pastDeadline(attemptCtx):
		return nil, fmt.Errorf("attempt timed out: %w", r.err), verdictFailed, spool.ReasonTimeout
	}
	return nil, r.err, verdictFailed, spool.ReasonError
}

// pastDeadline reports whether ctx's deadline has passed: on a loaded
// machine a handler (or the watch settling it without it) may return
// before the context's own timer has run and set its error.
func pastDeadline(ctx context.Context) bool {
	dl, ok := ctx.Deadline()
	return ok && !time.Now().Before(dl)
}

// settleWrite runs a settling write of attempt a (a result, a dead
// letter) through an election: each try bounded by the per-try timeout,
// retried while 3/4 of the task's AckWait from now allows, the task
// heartbeated meanwhile so that it stays ours. Each retry counts in
// WriteRetries. The outcome it writes is computed once, by the caller.
func (w *Worker) settleWrite(a attemptInfo, what string, fn func(ctx context.Context) error) error {
	ctx, cancel := context.WithTimeout(w.ioCtx, w.pipe.retryBudget(a.p))
	defer cancel()
	beat := time.Now()
	r := jsproto.Retry{PerTry: w.pipe.timeout, OnRetry: func(err error) {
		w.rec.writeRetry(a.p, a.typ)
		w.log.Debug("settling write sent again", "task_id", a.id, "write", what, "error", err)
		if time.Since(beat) >= w.ackWait[a.p]/4 {
			beat = time.Now()
			if err := a.msg.InProgress(); err != nil {
				w.log.Warn("heartbeat of a task awaiting its settling write failed", "task_id", a.id, "error", err)
			}
		}
	}}
	return r.Do(ctx, what, fn)
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
func (w *Worker) complete(a attemptInfo, out []byte, o outcome) {
	doc := a.doc(spool.StateCompleted)
	doc.Result, doc.ResultEncoding = spool.ResultValue(out)
	fin := time.Now()
	doc.FinishedAt = &fin
	if a.uniqueKey == "" && a.wf == nil && a.order == nil {
		err := w.pipe.put(&a, o, &doc)
		if err == nil {
			return
		}
		w.log.Warn("pipelined result write failed; writing it synchronously", "task_id", a.id, "error", err)
	}
	err := w.settleWrite(a, "writing the result of task "+a.id, func(ctx context.Context) error {
		return w.putFinal(ctx, a, doc, false)
	})
	if errors.Is(err, errYield) {
		o.completed = false
		w.settleCancelled(a, o)
		return
	}
	if err != nil {
		w.resultLost(a, o, err)
		return
	}
	if a.wf != nil {
		if err := w.finishStep(a, workflow.Outcome{State: workflow.Completed}); err != nil {
			// The result is stored: the redelivery skips the handler and
			// advances the workflow again.
			w.log.Warn("advancing the workflow of a completed step; the task will come back", "task_id", a.id, "error", err)
			w.nak(a, w.o.retryDelay(a.attempt))
			w.rec.record(a.p, a.typ, o)
			return
		}
	}
	err = w.settleWrite(a, "releasing the unique key of task "+a.id, func(ctx context.Context) error {
		return w.results.ReleaseUnique(ctx, a.uniqueKey, a.id)
	})
	if err != nil {
		w.log.Warn("releasing unique key", "task_id", a.id, "unique_key", a.uniqueKey, "error", err)
	}
	if err := w.finishOrder(a); err != nil {
		// The result is stored: the redelivery skips the handler and
		// passes the turn again.
		w.log.Warn("passing the turn of a completed task; the task will come back", "task_id", a.id, "error", err)
		w.nak(a, w.o.retryDelay(a.attempt))
		w.rec.record(a.p, a.typ, o)
		return
	}
	if err := a.msg.Ack(); err != nil {
		w.log.Warn("acking completed task", "task_id", a.id, "error", err)
	}
	w.rec.record(a.p, a.typ, o)
}

// resultLost settles a completed attempt whose result could not be
// stored within its retry budget: without a stored result the task must
// run again. The handler did not fail: it counts as retried, not failed.
func (w *Worker) resultLost(a attemptInfo, o outcome, err error) {
	w.log.Error("storing result failed; the task will be retried", "task_id", a.id, "error", err)
	o.completed, o.failed, o.retried = false, false, true
	w.nak(a, w.o.retryDelay(a.attempt))
	w.rec.record(a.p, a.typ, o)
}

// retry records the retrying state and NAKs with the backoff delay.
func (w *Worker) retry(a attemptInfo, herr error, o outcome) {
	delay := w.o.nextDelay(a.typ, a.attempt, herr)
	next := time.Now().Add(delay)
	doc := a.doc(spool.StateRetrying)
	doc.Error = herr.Error()
	doc.NextAttempt = &next
	if err := w.results.PutAsync(doc); err != nil {
		w.log.Warn("writing retrying state", "task_id", a.id, "error", err)
	}
	w.logFailure(a, herr, "task failed, will retry", "retry_in", delay)
	if a.order != nil && a.order.skip {
		if err := w.finishOrder(a); err != nil {
			w.log.Warn("passing the turn of a failed task; it keeps it until its retry", "task_id", a.id, "error", err)
		}
	}
	w.nak(a, delay)
	o.retried = true
	w.rec.record(a.p, a.typ, o)
}

func (w *Worker) nak(a attemptInfo, delay time.Duration) {
	if err := a.msg.NakWithDelay(delay); err != nil {
		w.log.Warn("nak failed; the task returns after AckWait", "task_id", a.id, "error", err)
	}
}

func (w *Worker) logFailure(a attemptInfo, herr error, msg string, attrs ...any) {
	attrs = append(attrs, "task_id", a.id, "type", a.typ, "priority", a.p.String(),
		"attempt", a.attempt, "max_attempts", a.maxAttempts, "error", herr)
	var pe *PanicError
	if errors.As(herr, &pe) {
		attrs = append(attrs, "stack", string(pe.Stack))
	}
	w.log.Warn(msg, attrs...)
}

// deadLetter copies the task to the dead-letter stream, writes the dead
// result, releases the unique key and only then removes the original. If
// the copy cannot be stored the original stays and comes back after a
// backoff.
func (w *Worker) deadLetter(a attemptInfo, reason spool.Reason, cause error, o outcome) {
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
	if w.cancelledNow(a) {
		o.failed = false
		w.settleCancelled(a, o)
		return
	}
	w.logFailure(a, cause, "task dead-lettered", "reason", string(reason))
	// The dead letter's Nats-Msg-Id (dlq.MsgID) makes a retried publish
	// store it once.
	err := w.settleWrite(a, "dead-lettering task "+a.id, func(ctx context.Context) error {
		return dlq.Publish(ctx, w.js, w.o.Names, dm)
	})
	if err != nil {
		w.log.Error("dead-lettering failed; the task stays queued", "task_id", a.id, "error", err)
		w.nak(a, w.o.retryDelay(a.attempt))
		o.retried = true
		w.rec.record(a.p, a.typ, o)
		return
	}
	err = w.settleWrite(a, "writing the dead result of task "+a.id, func(ctx context.Context) error {
		return w.putFinal(ctx, a, w.results.DeadDoc(dm), false)
	})
	if errors.Is(err, errYield) {
		// Cancelled between the check above and the write: the task ends
		// cancelled, as its canceller was told; its dead letter stays.
		w.log.Warn("task cancelled while it was dead-lettered: it ends cancelled, its dead letter stays in the DLQ", "task_id", a.id)
		o.failed = false
		w.settleCancelled(a, o)
		return
	}
	if err == nil {
		err = w.settleWrite(a, "releasing the unique key of task "+a.id, func(ctx context.Context) error {
			return w.results.ReleaseUnique(ctx, a.uniqueKey, a.id)
		})
	}
	if err != nil {
		w.log.Warn("writing dead result or releasing unique key", "task_id", a.id, "error", err)
	}
	if a.wf != nil {
		if err := w.finishStep(a, workflow.Outcome{State: workflow.Failed, Error: errText, Reason: reason}); err != nil {
			// The dead result is stored: the redelivery skips the handler
			// and advances the workflow again.
			w.log.Warn("advancing the workflow of a failed step; the task will come back", "task_id", a.id, "error", err)
			w.nak(a, w.o.retryDelay(a.attempt))
			o.retried = true
			w.rec.record(a.p, a.typ, o)
			return
		}
	}
	if err := w.finishOrder(a); err != nil {
		// The dead letter is stored (once, by its Nats-Msg-Id): the
		// redelivery dead-letters it again and passes the turn.
		w.log.Warn("passing the turn of a dead task; the task will come back", "task_id", a.id, "error", err)
		w.nak(a, w.o.retryDelay(a.attempt))
		o.retried = true
		w.rec.record(a.p, a.typ, o)
		return
	}
	if err := a.msg.TermWithReason(string(reason)); err != nil {
		w.log.Warn("removing dead-lettered task", "task_id", a.id, "error", err)
	}
	o.dead = true
	w.rec.record(a.p, a.typ, o)
}

// snooze hands the task back for a later run without counting the
// attempt: the snoozed document (one more snooze) is stored first, then
// the task is NAKed with the delay. A snooze that would need a delivery
// past the consumer's MaxDeliver dead-letters the task instead.
func (w *Worker) snooze(a attemptInfo, herr error, o outcome) {
	var se *snoozeError
	errors.As(herr, &se)
	if md := w.maxDeliver[a.p]; md > 0 && a.attempt+a.snoozes >= md {
		o.failed = true
		w.deadLetter(a, spool.ReasonError, fmt.Errorf("snoozed past the consumer's max deliveries (%d)", md), o)
		return
	}
	next := time.Now().Add(se.Delay)
	doc := a.doc(spool.StateSnoozed)
	doc.Snoozes = a.snoozes + 1
	doc.NextAttempt = &next
	err := w.settleWrite(a, "writing the snoozed state of task "+a.id, func(ctx context.Context) error {
		return w.results.Put(ctx, doc)
	})
	if err != nil {
		w.log.Warn("writing snoozed state; the snooze will count as an attempt", "task_id", a.id, "error", err)
	}
	w.log.Debug("task snoozed", "task_id", a.id, "type", a.typ, "for", se.Delay, "snoozes", doc.Snoozes)
	w.nak(a, se.Delay)
	w.rec.record(a.p, a.typ, o)
}
