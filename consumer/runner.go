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
// gives it a slot; false once Stop was called. w.mu is held: shutdown
// takes it after stopping closed, so an attempt admitted before has done
// its attempts.Add, and later ones see stopping.
func (w *Worker) admitLocked(lane int) bool {
	if w.isStopping() {
		return false
	}
	w.attempts.Add(1)
	w.slots.take(lanePriority(lane))
	w.lanes[lane].busy++
	return true
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

// job is a pulled task waiting for a runner.
type job struct {
	lane int
	msg  jetstream.Msg
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

func (w *Worker) runner(j job) {
	defer w.runners.Done()
	for {
		w.attempt(j.lane, j.msg)
		select {
		case j = <-w.runq:
		case <-w.stopping:
			return
		}
	}
}

// release frees the slot of a finished attempt. While fetches are in
// flight the dispatcher would plan nothing before they return (and each
// nudges it then), so it is left asleep.
func (w *Worker) release(lane int) {
	w.mu.Lock()
	fetching := w.slots.release(lanePriority(lane))
	w.lanes[lane].busy--
	w.mu.Unlock()
	if !fetching {
		w.nudge()
	}
}
