package consumer

import (
	"errors"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	spool "github.com/spoolq/spool/shared"
)

// The worker's side of pulling: what the puller tells it (pullEvents), the
// runner goroutines its attempts run on, and the slot an attempt frees.

func (w *Worker) pendingLocked(p spool.Priority, pending uint64) { w.prio[p].pending = pending }

func (w *Worker) emptyLocked(p spool.Priority) { w.prio[p].pending, w.prio[p].maybe = 0, false }

// admitLocked counts an attempt about to start; false once Stop was
// called. w.mu is held: shutdown takes it after stopping closed, so an
// attempt admitted before has done its attempts.Add, and later ones see
// stopping.
func (w *Worker) admitLocked() bool {
	if w.isStopping() {
		return false
	}
	w.attempts.Add(1)
	return true
}

// pullFailed logs a failed pull and rests the priority for
// pullErrorPause.
func (w *Worker) pullFailed(p spool.Priority, err error) {
	if w.isStopping() && errors.Is(err, nats.ErrConnectionClosed) {
		return
	}
	w.log.Warn("pull failed", "priority", p.String(), "error", err)
	w.mu.Lock()
	w.prio[p].restUntil = time.Now().Add(pullErrorPause)
	w.mu.Unlock()
}

// job is a pulled task waiting for a runner, or for a slot in the queue
// (since at, the last time its AckWait clock restarted).
type job struct {
	p   spool.Priority
	msg jetstream.Msg
	at  time.Time
}

// queueLocked queues a pulled task that found every slot busy (it was
// pulled ahead): the next slot that frees takes it. w.mu is held.
func (w *Worker) queueLocked(p spool.Priority, m jetstream.Msg) {
	w.queue = append(w.queue, job{p: p, msg: m, at: time.Now()})
}

// popLocked takes the oldest queued task. w.mu is held; the queue is not
// empty.
func (w *Worker) popLocked() job {
	j := w.queue[0]
	// Taken from the front: append moves the live tasks to a new array
	// when the old one's end is reached.
	w.queue[0] = job{}
	w.queue = w.queue[1:]
	return j
}

// roundTripLocked records how long a no-wait fetch took to bring what
// it asked for: an estimate of the pull round trip. w.mu is held.
func (w *Worker) roundTripLocked(d time.Duration) { w.rtt = ewma(w.rtt, d) }

// ewma moves avg an eighth of the way to sample (to sample when avg is
// still 0).
func ewma(avg, sample time.Duration) time.Duration {
	if avg == 0 {
		return sample
	}
	return avg + (sample-avg)/8
}

// startQueuedLocked starts queued tasks on the idle slots (the pool
// grew). It returns the jobs to start once w.mu is released.
func (w *Worker) startQueuedLocked() []job {
	var start []job
	for w.slots.queued > 0 && w.slots.busy < w.slots.size && w.hardCtx.Err() == nil {
		j := w.popLocked()
		w.slots.dequeue(j.p)
		start = append(start, j)
	}
	return start
}

// handBackQueued hands every queued task back (NAK without delay) when
// shutdown cancels the running handlers, so another worker runs it at
// once; a graceful stop runs them first (see release).
func (w *Worker) handBackQueued() {
	w.mu.Lock()
	q := w.queue
	w.queue = nil
	w.slots.queued = 0
	w.mu.Unlock()
	for _, j := range q {
		if err := j.msg.Nak(); err != nil {
			w.log.Warn("handing back a task pulled ahead", "priority", j.p.String(), "error", err)
		}
		w.attempts.Done()
	}
}

// beatQueued heartbeats queued tasks that have waited a third of their
// AckWait (every slot ran long attempts meanwhile), so that none is
// delivered again while it waits.
func (w *Worker) beatQueued() {
	now := time.Now()
	var beat []jetstream.Msg
	w.mu.Lock()
	for i := range w.queue {
		if j := &w.queue[i]; now.Sub(j.at) >= w.ackWait[j.p]/3 {
			j.at = now
			beat = append(beat, j.msg)
		}
	}
	w.mu.Unlock()
	for _, m := range beat {
		if err := m.InProgress(); err != nil {
			w.log.Warn("heartbeat of a task waiting for a slot failed", "error", err)
		}
	}
}

// startAttempt runs an attempt on an idle runner goroutine, or on a new
// one when none is idle. Runners outlive their attempts: a fresh goroutine
// grows its stack on every task (copying it a few times), which was a
// tenth of the worker's CPU with fast handlers. There are never more
// runners than attempts have run at once (at most MaxConcurrency); they
// end at Stop.
func (w *Worker) startAttempt(p spool.Priority, m jetstream.Msg) {
	select {
	case w.runq <- job{p: p, msg: m}:
	default:
		w.runners.Add(1)
		go w.runner(job{p: p, msg: m})
	}
}

// runner runs attempts, and queued tasks in the slots its attempts free.
func (w *Worker) runner(j job) {
	defer w.runners.Done()
	for {
		start := time.Now()
		w.attempt(j.p, j.msg)
		if next, ok := w.release(j.p, time.Since(start)); ok {
			j = next
			continue
		}
		select {
		case j = <-w.runq:
		case <-w.stopping:
			return
		}
	}
}

// release frees the slot of an attempt of p that took run, or hands it to
// the oldest queued task, which it returns (ok) for the caller to run
// (during a graceful stop too: the task was pulled, and the queue is
// about one pull round trip of work; once shutdown cancels the handlers,
// handBackQueued hands the rest back). A freed slot wakes the dispatcher
// unless fetches are in flight: it would plan nothing before they return
// (and each nudges it then).
func (w *Worker) release(p spool.Priority, run time.Duration) (next job, ok bool) {
	w.mu.Lock()
	w.inSlot = ewma(w.inSlot, run)
	if w.slots.queued > 0 && w.hardCtx.Err() == nil {
		next = w.popLocked()
		w.slots.handOver(p, next.p)
		// The next round of fetches goes once half the queue has
		// drained (see dispatch), before the slots run dry.
		wake := w.slots.fetching == 0 && 2*w.slots.free() >= w.slots.size+w.slots.ahead
		w.mu.Unlock()
		if wake {
			w.nudge()
		}
		return next, true
	}
	fetching := w.slots.release(p)
	w.mu.Unlock()
	if !fetching {
		w.nudge()
	}
	return job{}, false
}
