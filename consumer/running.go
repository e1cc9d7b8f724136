package consumer

import (
	"context"
	"fmt"
	"runtime/debug"
	"sync"
	"time"

	"github.com/spoolq/spool/consumer/internal/results"
	spool "github.com/spoolq/spool/shared"
)

// running is the stage of an attempt in which its handler runs: under its
// deadline, with a watch that heartbeats the message, writes the processing
// state and settles an overstaying handler, and with its context cancelled
// when the task is cancelled or the worker shuts down.
type running struct {
	io              *taskIO
	h               Handler
	steps           *steps // serves the workflow submission type
	results         *results.Store
	cancels         *cancels
	settle          *settling
	processingDelay time.Duration
	// hard ends running handlers (through endHandlers) when the shutdown
	// timeout runs out; hardCancel ends it. base, its values without its
	// cancellation, is the parent of every handler context, so starting an
	// attempt takes no lock shared by every runner.
	hard       context.Context
	hardCancel context.CancelFunc
	base       context.Context
	// watches are the running attempts' timers, for endHandlers.
	watchMu sync.Mutex
	watches map[*watch]struct{}
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
// state after ProcessingDelay, ends the handler's context at its deadline,
// and settles the attempt without the handler when it has not returned
// handlerGrace after its deadline or after shutdown cancelled it (timeout,
// or hand-back); the slot then stays busy until the handler returns.
func (r *running) run(a *attemptInfo, t *Task, timeout time.Duration, o outcome) {
	// The attempt's context hangs off base, so it takes no lock shared by
	// every runner. Shutdown reaches it through the watches (endHandlers).
	wa := r.startWatch(time.Now().Add(timeout), a, o)
	ctx := wa.ctx.ctx
	defer wa.ctx.cancel(nil)
	t.watch = wa
	r.cancels.track(a.id, wa)
	defer r.cancels.untrack(a.id, wa)
	var res handlerResult
	func() {
		defer func() {
			if v := recover(); v != nil {
				res = handlerResult{err: &PanicError{Value: v, Stack: debug.Stack()}}
			}
		}()
		res.out, res.err = r.steps.handler(r.h, t).ProcessTask(ctx, t)
	}()
	// A no-op when the watch settled the attempt already; waits for it
	// when it is settling it now.
	wa.finish(res)
}

// watch is the timer of a running attempt: it sends InProgress every
// AckWait/3, writes the processing state once the attempt has run for
// ProcessingDelay (when that is not 0, in which case the attempt wrote it
// as it started), and settles the attempt when its handler overstays (see
// run). Nothing it would still do happens once the attempt is settled, so
// a late processing write cannot overwrite the final state.
type watch struct {
	r *running
	// ctx is the handler's context, which the watch ends at the deadline.
	ctx attemptCtx
	// a is the attempt's record, shared with admission: nothing changes
	// it while the attempt runs.
	a     *attemptInfo
	o     outcome
	every time.Duration
	once  sync.Once

	mu           sync.Mutex
	stopped      bool
	beat         time.Time // the last heartbeat (a.beat until the first)
	nextBeat     time.Time
	processingAt time.Time // zero once written or not wanted
	deadlineAt   time.Time // the deadline, zero once ctx ended at it
	expireAt     time.Time // the deadline plus handlerGrace
	timer        *time.Timer

	// sameTask is the next running attempt of the same task in the
	// cancellation registry (cancels.running); guarded by its lock.
	sameTask *watch
}

func (r *running) startWatch(deadline time.Time, a *attemptInfo, o outcome) *watch {
	every := r.io.ackWait[a.p] / 3
	if every <= 0 {
		every = 10 * time.Second
	}
	beat := a.beat
	if beat.IsZero() {
		beat = a.started
	}
	h := &watch{r: r, a: a, o: o, every: every, beat: beat, nextBeat: beat.Add(every),
		deadlineAt: deadline, expireAt: deadline.Add(handlerGrace)}
	h.ctx.init(r.base, deadline)
	if d := r.processingDelay; d > 0 {
		h.processingAt = a.started.Add(d)
	}
	h.mu.Lock() // the first firing waits until timer is set
	h.timer = time.AfterFunc(time.Until(h.nextFiringLocked()), h.fire)
	h.mu.Unlock()
	// Registered before looking at hard: cancelHandlers cancels it before
	// it visits the registry, so an attempt either is visited or sees the
	// cancellation here.
	r.watchMu.Lock()
	r.watches[h] = struct{}{}
	r.watchMu.Unlock()
	if r.hard.Err() != nil {
		h.ctx.cancel(context.Cause(r.hard))
		h.expireSoon()
	}
	return h
}

// nextFiringLocked is the earliest of the next heartbeat, the processing
// write, the deadline and the expiry. h.mu is held.
func (h *watch) nextFiringLocked() time.Time {
	next := h.nextBeat
	for _, t := range [...]time.Time{h.processingAt, h.deadlineAt, h.expireAt} {
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
	// The context ends outside h.mu: ending it runs the cancellation of
	// the contexts the handler derived from it.
	deadline := !h.deadlineAt.IsZero() && !now.Before(h.deadlineAt)
	if deadline {
		h.deadlineAt = time.Time{}
	}
	if !now.Before(h.expireAt) {
		h.mu.Unlock()
		if deadline {
			h.ctx.expire()
		}
		// Ended at its deadline, or earlier by a cancellation or the
		// shutdown, whose grace ran out. The firing that passed the
		// deadline may still be ending the context on a loaded machine:
		// the attempt timed out all the same, never a success.
		err := h.ctx.ctx.Err()
		if err == nil {
			err = context.DeadlineExceeded
		}
		h.r.io.log.Warn("handler still running after its context ended; settling the task now, the slot stays busy until the handler returns",
			"task_id", h.a.id, "type", h.a.typ, "error", err)
		h.finish(handlerResult{err: err})
		return
	}
	if !h.processingAt.IsZero() && !now.Before(h.processingAt) {
		h.processingAt = time.Time{}
		h.r.putProcessing(*h.a)
	}
	if !now.Before(h.nextBeat) {
		if err := h.a.msg.InProgress(); err != nil {
			h.r.io.log.Warn("heartbeat failed", "task_id", h.a.id, "error", err)
		}
		h.beat = now
		h.nextBeat = now.Add(h.every)
	}
	h.timer.Reset(time.Until(h.nextFiringLocked()))
	h.mu.Unlock()
	if deadline {
		h.ctx.expire()
	}
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
	if err := h.r.results.PutUnacked(doc); err != nil {
		return err
	}
	h.r.results.Event(spool.EventProgress, &doc)
	return nil
}

// cancelTask cancels the handler's context because its task was
// cancelled, and gives the handler handlerGrace to return.
func (h *watch) cancelTask() {
	h.ctx.cancel(ErrCancelled)
	h.expireSoon()
}

// finish settles the attempt with r, once: the first caller (the handler
// returning, or the watch expiring) wins and the other waits for it.
func (h *watch) finish(r handlerResult) {
	h.once.Do(func() {
		h.stop()
		o := h.o
		o.run = time.Since(h.a.started)
		a := *h.a
		a.beat = h.beat // the timer is stopped: it no longer moves
		h.r.settle.settle(h.ctx.ctx, a, r, o)
	})
}

// stop ends the timer; nothing is sent after it returns.
func (h *watch) stop() {
	h.mu.Lock()
	h.stopped = true
	h.timer.Stop()
	h.mu.Unlock()
	h.r.watchMu.Lock()
	delete(h.r.watches, h)
	h.r.watchMu.Unlock()
}

// cancelHandlers cancels every handler's context and gives the handlers
// handlerGrace to return before their attempts are settled without them.
func (r *running) cancelHandlers() {
	r.hardCancel()
	r.endHandlers(context.Cause(r.hard))
}

// endHandlers cancels the context of every running attempt with cause,
// hard's, and gives it handlerGrace. It runs once hard ends, whatever
// ended it (cancelHandlers, or its parent); an attempt whose watch
// registers later sees hard ended in startWatch.
func (r *running) endHandlers(cause error) {
	r.watchMu.Lock()
	defer r.watchMu.Unlock()
	for h := range r.watches {
		h.ctx.cancel(cause)
		h.expireSoon()
	}
}

// putProcessing writes the processing state over the revision the attempt
// read, so it never overwrites a cancellation (see putFinal).
func (r *running) putProcessing(a attemptInfo) {
	if err := r.results.PutUnackedAt(a.doc(spool.StateProcessing), a.rev); err != nil {
		r.io.log.Warn("writing processing state", "task_id", a.id, "error", err)
	}
}
