package consumer

import (
	"errors"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// The worker's side of pulling: what the puller tells it (pullEvents), the
// runner goroutines its attempts run on, and the slot an attempt frees.

func (w *Worker) pendingLocked(lane int, pending uint64) { w.lanes[lane].pending = pending }

func (w *Worker) emptyLocked(lane int) { w.lanes[lane].pending, w.lanes[lane].maybe = 0, false }

// admitLocked counts an attempt of a task of the lane about to start and
// gives it a slot, or queues it when every slot is busy (a fetched task
// pulled ahead); handBack once Stop was called. w.mu is held: shutdown
// takes it after stopping closed, so an attempt admitted before has done
// its attempts.Add, and later ones see stopping.
func (w *Worker) admitLocked(lane int, poll bool, m jetstream.Msg) (start, handBack bool) {
	if w.isStopping() {
		return false, true
	}
	w.attempts.Add(1)
	if !w.slots.runnable(poll) {
		w.slots.enqueue()
		w.queue = append(w.queue, job{lane: lane, msg: m, at: time.Now()})
		return false, false
	}
	w.slots.take(lanePriority(lane))
	w.lanes[lane].busy++
	return true, false
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
	for w.slots.queued > 0 && w.slots.busy < w.slots.size && w.run.hard.Err() == nil {
		j := w.popLocked()
		w.slots.dequeue(lanePriority(j.lane))
		w.lanes[j.lane].busy++
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
			w.log.Warn("handing back a task pulled ahead", "priority", lanePriority(j.lane).String(), "error", err)
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
		if j := &w.queue[i]; now.Sub(j.at) >= w.ackWait[lanePriority(j.lane)]/3 {
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

// pullFailed logs a failed pull and rests the lane for pullErrorPause.
func (w *Worker) pullFailed(lane int, err error) {
	if w.isStopping() && errors.Is(err, nats.ErrConnectionClosed) {
		return
	}
	w.log.Warn("pull failed", "stream", w.lanes[lane].stream.CachedInfo().Config.Name, "priority", lanePriority(lane).String(), "error", err)
	w.mu.Lock()
	w.lanes[lane].restUntil = time.Now().Add(pullErrorPause)
	w.mu.Unlock()
}

// job is a pulled task waiting for a runner, or for a slot in the queue
// (since at, the last time its AckWait clock restarted).
type job struct {
	lane int
	msg  jetstream.Msg
	at   time.Time
}

// startAttempt runs an attempt on an idle runner goroutine, or on a new
// one when none is idle. Runners outlive their attempts: a fresh goroutine
// grows its stack on every task (copying it a few times), which was a
// tenth of the worker's CPU with fast handlers. There are never more
// runners than attempts have run at once (at most MaxConcurrency); they
// end at Stop.
func (w *Worker) startAttempt(lane int, m jetstream.Msg) {
	select {
	case w.runq <- job{lane: lane, msg: m}:
	default:
		w.runners.Add(1)
		go w.runner(job{lane: lane, msg: m})
	}
}

// runner runs attempts, and queued tasks in the slots its attempts free.
func (w *Worker) runner(j job) {
	defer w.runners.Done()
	for {
		start := time.Now()
		w.admit.attempt(j.lane, j.msg)
		w.attempts.Done()
		if next, ok := w.release(j.lane, time.Since(start)); ok {
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

// release frees the slot of an attempt of the lane that took run, or
// hands it to the oldest queued task, which it returns (ok) for the caller
// to run (during a graceful stop too: the task was pulled, and the queue
// is about one pull round trip of work; once shutdown cancels the
// handlers, handBackQueued hands the rest back). A freed slot wakes the
// dispatcher unless fetches are in flight: it would plan nothing before
// they return (and each nudges it then).
func (w *Worker) release(lane int, run time.Duration) (next job, ok bool) {
	w.mu.Lock()
	w.inSlot = ewma(w.inSlot, run)
	w.lanes[lane].busy--
	if w.slots.queued > 0 && w.run.hard.Err() == nil {
		next = w.popLocked()
		w.slots.handOver(lanePriority(lane), lanePriority(next.lane))
		w.lanes[next.lane].busy++
		// The next round of fetches goes once half the queue has
		// drained (see dispatch), before the slots run dry.
		wake := w.slots.fetching == 0 && 2*w.slots.free() >= w.slots.size+w.slots.ahead
		w.mu.Unlock()
		if wake {
			w.nudge()
		}
		return next, true
	}
	fetching := w.slots.release(lanePriority(lane))
	w.mu.Unlock()
	if !fetching {
		w.nudge()
	}
	return job{}, false
}
