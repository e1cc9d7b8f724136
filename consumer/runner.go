package consumer

import (
	"errors"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// The worker's side of pulling: what the puller tells it (pullEvents), the
// runner goroutines its attempts run on, and the slot an attempt frees.

func (d *dispatcher) pendingLocked(lane int, pending uint64) { d.lanes[lane].pending = pending }

func (d *dispatcher) emptyLocked(lane int) { d.lanes[lane].pending, d.lanes[lane].maybe = 0, false }

// admitLocked counts an attempt of a task of the lane about to start and
// gives it a slot, or queues it when every slot is busy (a fetched task
// pulled ahead); handBack once Stop was called. d.mu is held: shutdown
// takes it after stopping closed, so an attempt admitted before has done
// its attempts.Add, and later ones see stopping.
func (d *dispatcher) admitLocked(lane int, poll bool, m jetstream.Msg) (start, handBack bool) {
	if d.isStopping() {
		return false, true
	}
	d.attempts.Add(1)
	d.lanes[lane].held++
	if !d.slots.runnable(poll) {
		d.slots.enqueue()
		d.queue = append(d.queue, job{lane: lane, msg: m, at: time.Now()})
		return false, false
	}
	d.slots.take(lanePriority(lane))
	d.lanes[lane].busy++
	return true, false
}

// popLocked takes the oldest queued task. d.mu is held; the queue is not
// empty.
func (d *dispatcher) popLocked() job {
	j := d.queue[0]
	// Taken from the front: append moves the live tasks to a new array
	// when the old one's end is reached.
	d.queue[0] = job{}
	d.queue = d.queue[1:]
	return j
}

// roundTripLocked records how long a no-wait fetch took to bring what
// it asked for: an estimate of the pull round trip. d.mu is held.
func (d *dispatcher) roundTripLocked(rtt time.Duration) { d.rtt = ewma(d.rtt, rtt) }

// ewma moves avg an eighth of the way to sample (to sample when avg is
// still 0).
func ewma(avg, sample time.Duration) time.Duration {
	if avg == 0 {
		return sample
	}
	return avg + (sample-avg)/8
}

// startQueuedLocked starts queued tasks on the idle slots (the pool
// grew). It returns the jobs to start once d.mu is released.
func (d *dispatcher) startQueuedLocked() []job {
	var start []job
	for d.slots.queued > 0 && d.slots.busy < d.slots.size && d.hard.Err() == nil {
		j := d.popLocked()
		d.slots.dequeue(lanePriority(j.lane))
		d.lanes[j.lane].busy++
		start = append(start, j)
	}
	return start
}

// handBackQueued hands every queued task back (NAK without delay) when
// shutdown cancels the running handlers, so another worker runs it at
// once; a graceful stop runs them first (see release).
func (d *dispatcher) handBackQueued() {
	d.mu.Lock()
	q := d.queue
	d.queue = nil
	d.slots.queued = 0
	for _, j := range q {
		d.lanes[j.lane].held--
	}
	d.mu.Unlock()
	for _, j := range q {
		if err := j.msg.Nak(); err != nil {
			d.log.Warn("handing back a task pulled ahead", "priority", lanePriority(j.lane).String(), "error", err)
		}
		d.attempts.Done()
	}
}

// beatQueued heartbeats queued tasks that have waited a third of their
// AckWait (every slot ran long attempts meanwhile), so that none is
// delivered again while it waits.
func (d *dispatcher) beatQueued() {
	now := time.Now()
	var beat []jetstream.Msg
	d.mu.Lock()
	for i := range d.queue {
		if j := &d.queue[i]; now.Sub(j.at) >= d.ackWait[lanePriority(j.lane)]/3 {
			j.at = now
			beat = append(beat, j.msg)
		}
	}
	d.mu.Unlock()
	for _, m := range beat {
		if err := m.InProgress(); err != nil {
			d.log.Warn("heartbeat of a task waiting for a slot failed", "error", err)
		}
	}
}

// pullFailed logs a failed pull and rests the lane for pullErrorPause.
func (d *dispatcher) pullFailed(lane int, err error) {
	if d.isStopping() && errors.Is(err, nats.ErrConnectionClosed) {
		return
	}
	d.log.Warn("pull failed", "stream", d.lanes[lane].stream.CachedInfo().Config.Name, "priority", lanePriority(lane).String(), "error", err)
	d.mu.Lock()
	d.lanes[lane].restUntil = time.Now().Add(pullErrorPause)
	d.mu.Unlock()
}

// job is a pulled task waiting for a runner, or for a slot in the queue;
// at is the last time its AckWait clock restarted as far as the worker
// knows (its arrival, then each heartbeat), which the attempt carries on.
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
func (d *dispatcher) startAttempt(lane int, m jetstream.Msg) {
	j := job{lane: lane, msg: m, at: time.Now()}
	select {
	case d.runq <- j:
	default:
		d.runners.Add(1)
		go d.runner(j)
	}
}

// runner runs attempts, and queued tasks in the slots its attempts free.
func (d *dispatcher) runner(j job) {
	defer d.runners.Done()
	for {
		start := time.Now()
		d.attempt(j.lane, j.msg, j.at)
		d.attempts.Done()
		if next, ok := d.release(j.lane, time.Since(start)); ok {
			j = next
			continue
		}
		var ok bool
		if j, ok = d.nextJob(); !ok {
			return
		}
	}
}

// runnerReserve is the stack an idle runner holds below its wait. The
// garbage collector halves a goroutine's stack when it uses less than a
// quarter of it, and an idle runner's wait alone uses little: without the
// reserve, the stack an attempt grew (past 8 KiB, settling a completion)
// shrank while the runner waited, and the next attempt copied it as it
// grew again. With it, stacks of up to 4 × runnerReserve stay.
const runnerReserve = 4 << 10

// nextJob waits for an idle runner's next job; false once the dispatcher
// stops. Its frame holds runnerReserve bytes of stack (see there).
//
//go:noinline
func (d *dispatcher) nextJob() (job, bool) {
	var reserve [runnerReserve]byte
	holdStack(&reserve)
	select {
	case j := <-d.runq:
		return j, true
	case <-d.stopping:
		return job{}, false
	}
}

// holdStack keeps its argument on the caller's stack: the compiler cannot
// drop an array whose address a call that is not inlined takes.
//
//go:noinline
func holdStack(*[runnerReserve]byte) {}

// release frees the slot of an attempt of the lane that took run, or
// hands it to the oldest queued task, which it returns (ok) for the caller
// to run (during a graceful stop too: the task was pulled, and the queue
// is about one pull round trip of work; once shutdown cancels the
// handlers, handBackQueued hands the rest back). A freed slot wakes the
// dispatcher unless fetches are in flight: it would plan nothing before
// they return (and each nudges it then).
func (d *dispatcher) release(lane int, run time.Duration) (next job, ok bool) {
	d.mu.Lock()
	d.inSlot = ewma(d.inSlot, run)
	d.lanes[lane].busy--
	d.lanes[lane].held--
	if d.slots.queued > 0 && d.hard.Err() == nil {
		next = d.popLocked()
		d.slots.handOver(lanePriority(lane), lanePriority(next.lane))
		d.lanes[next.lane].busy++
		// The next round of fetches goes once half the queue has
		// drained (see dispatch), before the slots run dry.
		wake := d.slots.fetching == 0 && 2*d.slots.free() >= d.slots.size+d.slots.ahead
		d.mu.Unlock()
		if wake {
			d.nudge()
		}
		return next, true
	}
	fetching := d.slots.release(lanePriority(lane))
	d.mu.Unlock()
	if !fetching {
		d.nudge()
	}
	return job{}, false
}
