package consumer

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	spool "github.com/spoolq/spool/shared"
)

// dispatcher pulls tasks into the worker's slots and runs their attempts.
// It binds the lanes (the priority consumers of the partitions pulled),
// plans pulls for the free slots over the priorities (scheduler), sends
// them (puller), hands the tasks to runner goroutines, queues the tasks
// pulled ahead, and scales the pool (autoscale.go). Its state is guarded
// by mu.
type dispatcher struct {
	o        *config
	log      *slog.Logger
	sched    *scheduler
	stopping <-chan struct{}

	// Set by bindPartitions. tasks is SPOOL_TASKS (partition 0): where
	// the held, parked and schedule subjects are, whatever partitions the
	// worker pulls. parts are the partitions pulled, in order; patterns
	// the type patterns served where workers pull by type (nil: by
	// priority). A lane group is a partition, or a partition and a
	// pattern; groups counts them, and lanes are their priority
	// consumers (laneOf).
	tasks      jetstream.Stream
	parts      []int
	patterns   []string
	groups     int
	lanes      []lane
	maxDeliver [numPriorities]int           // 0: unlimited; the lowest of the partitions'
	ackWait    [numPriorities]time.Duration // the shortest of the partitions'

	// Set by begin. attempt runs an attempt of a pulled task; hard ends
	// when shutdown cancels the running handlers; onRefresh runs at every
	// refresh.
	ioCtx     context.Context
	attempt   func(lane int, msg jetstream.Msg, beat time.Time)
	hard      context.Context
	onRefresh func()
	// pl sends pull requests and receives the tasks they bring; wk
	// watches the idle lanes that are not long-polled (wakeup.go).
	pl *puller
	wk *waker

	// wake nudges the dispatcher (capacity 1, never closed).
	wake chan struct{}
	// loops counts the dispatcher and refresher goroutines; pulls counts
	// outstanding pull requests; attempts counts running attempts and
	// completions in the pipeline.
	loops, pulls, attempts sync.WaitGroup
	// runq hands pulled tasks to idle runner goroutines (unbuffered: a
	// send succeeds only when a runner waits); runners counts them.
	runq    chan job
	runners sync.WaitGroup

	mu    sync.Mutex
	slots slots
	// spread is where the next split of a priority's slots over its
	// partitions starts (splitLocked), per priority.
	spread [numPriorities]int
	// Scratch of dispatch: per lane, the slots it can use now and whether
	// it rests; per partition, a priority's split.
	laneCaps []int
	resting  []bool
	split    []int
	// queue holds tasks pulled ahead, waiting for a slot (oldest first);
	// rtt and inSlot are moving averages of a no-wait fetch's round trip
	// and of an attempt's time in its slot, which size the pull-ahead
	// (see slots).
	queue       []job
	rtt, inSlot time.Duration
	// switched logs once that the deployment switched to pulling by type
	// under this worker, which pulls by priority (retireIfSwitched).
	switched sync.Once
	// rateRoom says how many more tasks of a type its rate line takes
	// (see holdRates); nil when no lane is bound by one.
	rateRoom func(typ string) (int, bool)
}

func newDispatcher(o *config, log *slog.Logger, stopping <-chan struct{}) *dispatcher {
	return &dispatcher{
		o:        o,
		log:      log,
		sched:    newScheduler(*o),
		stopping: stopping,
		runq:     make(chan job),
		wake:     make(chan struct{}, 1),
		slots:    newSlots(o.MinConcurrency, o.MaxConcurrency),
	}
}

// begin sets what the dispatcher runs attempts with and subscribes to
// pulled tasks; run then starts pulling.
func (d *dispatcher) begin(nc *nats.Conn, ioCtx, hard context.Context, attempt func(int, jetstream.Msg, time.Time), onRefresh func()) error {
	d.ioCtx, d.hard, d.attempt, d.onRefresh = ioCtx, hard, attempt, onRefresh
	var err error
	d.pl, err = newPuller(d, nc)
	if err != nil {
		return err
	}
	d.wk = newWaker(nc, d.log, d.lanes, min(d.o.IOTimeout, 2*time.Second), d.woke)
	return nil
}

// run starts the dispatcher and refresher goroutines.
func (d *dispatcher) run() {
	d.mu.Lock()
	d.slots.startWindow(time.Now())
	for i := range d.lanes {
		d.lanes[i].maybe = true // unknown until the first pull
	}
	d.mu.Unlock()
	d.loops.Add(2)
	go d.dispatchLoop()
	go d.refreshLoop()
}

// stopPulling runs once stopping is closed. It waits for the dispatcher
// and refresher goroutines and for the no-wait fetches out, so the tasks
// they bring are handed back while the subscription still takes them,
// then gives up the long-polls still out (a task one still brings is
// handed back at once).
func (d *dispatcher) stopPulling() {
	// Taken after stopping closed: a pull that took a slot under the lock
	// before has done its attempts.Add, and later pulls see stopping.
	d.mu.Lock()
	d.mu.Unlock() //nolint:staticcheck // an empty critical section orders the admissions before it
	d.loops.Wait()
	d.wk.close()
	d.awaitFetches()
	d.pl.expire(true)
}

// busy is the number of slots running an attempt.
func (d *dispatcher) busy() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.slots.busy
}

// stats fills the pool's and the priorities' part of s; prio are the
// priorities' counters.
func (d *dispatcher) stats(s *Stats, prio [numPriorities]Counters, now time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	s.Slots, s.Busy, s.Idle, s.Queued = d.slots.size, d.slots.busy, d.slots.idle(), d.slots.queued
	s.ScaleUps, s.ScaleDowns = d.slots.scaleUps, d.slots.scaleDowns
	backlog, oldest := d.backlogLocked()
	for _, p := range spool.Priorities {
		ps := PriorityStats{
			Priority: p,
			Counters: prio[p],
			Busy:     d.slots.prio[p],
			Backlog:  backlog[p],
			Boost:    1,
			Weight:   d.o.Weights[p],
		}
		if o := oldest[p]; !o.IsZero() {
			ps.OldestWait = now.Sub(o)
			ps.Boost = boostFor(d.o.Boost, ps.OldestWait)
			ps.Weight *= ps.Boost
		}
		s.Priorities = append(s.Priorities, ps)
	}
}

// awaitFetches waits, for pullAnswerWait at most, until no no-wait fetch
// is out. The dispatcher has stopped: a request that ends nudges d.wake,
// which only this wait reads now.
func (d *dispatcher) awaitFetches() {
	timer := time.NewTimer(pullAnswerWait)
	defer timer.Stop()
	for {
		d.mu.Lock()
		fetching := d.slots.fetching > 0
		d.mu.Unlock()
		if !fetching {
			return
		}
		select {
		case <-d.wake:
		case <-timer.C:
			return
		}
	}
}

func (d *dispatcher) nudge() {
	select {
	case d.wake <- struct{}{}:
	default:
	}
}

func (d *dispatcher) isStopping() bool {
	select {
	case <-d.stopping:
		return true
	default:
		return false
	}
}

// dispatchLoop hands free slots to pulls whenever something changes: a slot
// frees, a pull returns, a refresh learns of a backlog.
func (d *dispatcher) dispatchLoop() {
	defer d.loops.Done()
	for {
		plans, start, watch := d.dispatch()
		for _, j := range start {
			d.startAttempt(j.lane, j.msg)
		}
		d.pl.send(plans)
		d.wk.arm(watch, d.unarm)
		select {
		case <-d.wake:
		case <-d.stopping:
			return
		}
	}
}

// dispatch plans pulls under the lock, and the lanes to watch
// (watchLocked); the caller sends and arms them.
func (d *dispatcher) dispatch() (plans []pullPlan, start []job, watch []int) {
	if d.isStopping() {
		return nil, nil, nil
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	plans, start = d.planLocked()
	return plans, start, d.watchLocked()
}

// planLocked plans pulls. d.mu is held.
//
// Slots go first to priorities known to have work, in any partition:
// the scheduler splits the free slots over the priorities, and each
// priority's share is split over its partitions' lanes with work
// (splitLocked), as no-wait fetches. When slots are left over (no lane is
// known to have work, or what is known is fewer tasks than free slots),
// every other lane gets a long-poll, the most urgent priorities' first: a
// single-message pull that reserves a slot out of MaxConcurrency, so a
// message it brings always has a slot. When the spare slots do not cover
// every such lane and wake-ups are on, none is long-polled: they are
// watched instead, and a lane woken by a publish is long-polled first
// (pollWokenLocked).
func (d *dispatcher) planLocked() (plans []pullPlan, start []job) {
	var caps [numPriorities]int
	_, oldest := d.backlogLocked()
	laneCaps, resting := d.laneCaps, d.resting
	known := false
	var capped [][2]int // lanes with a concurrency cap to pull, and how many
	now := time.Now()
	for i := range d.lanes {
		st := &d.lanes[i]
		p := lanePriority(i)
		rateRoom := d.laneRoomLocked(i) // a full rate line rests its lane
		resting[i] = now.Before(st.restUntil) || st.paused || st.retired || rateRoom == 0
		laneCaps[i] = 0
		switch {
		case resting[i]:
		case d.pl.polling(i):
		case st.pending > 0:
			laneCaps[i] = int(min(st.pending, uint64(d.o.MaxConcurrency+maxAhead(d.o.MaxConcurrency)))) // what a round may ask for: the slots and the most ahead
		case st.maybe && !d.pl.outstanding(i):
			laneCaps[i] = 1
		}
		if rateRoom > 0 {
			laneCaps[i] = min(laneCaps[i], rateRoom)
		}
		if room := d.roomLocked(i); room >= 0 {
			// The server delivers no more than the consumer's cap, and
			// the next task only once the last one's ack reached it: the
			// lane is pulled with a long-poll for its room (below),
			// which waits for that ack without holding up the rounds of
			// fetches of the other lanes.
			if n := min(laneCaps[i], room); n > 0 && !d.pl.outstanding(i) {
				capped = append(capped, [2]int{i, n})
			}
			laneCaps[i] = 0
			resting[i] = resting[i] || room == 0 || d.pl.outstanding(i)
		}
		if laneCaps[i] > 0 {
			caps[p] = min(caps[p]+laneCaps[i], d.o.MaxConcurrency+maxAhead(d.o.MaxConcurrency))
			known = true
		}
	}
	for _, c := range capped {
		if n := min(c[1], d.slots.spare()); n > 0 {
			d.lanes[c[0]].woken = false
			d.slots.reserve(n, true)
			plans = append(plans, d.pl.planLocked(c[0], n, true))
			resting[c[0]] = true
		}
	}
	plans = d.pollWokenLocked(plans, laneCaps, resting)
	if known {
		d.scaleUpLocked()
		start = d.startQueuedLocked()
		if d.slots.fetching > 0 {
			// One round of fetches at a time: slots freed meanwhile are
			// pulled together in the next round, in larger batches (the
			// server answers fetch requests one by one, so batches carry
			// the throughput).
			return plans, start
		}
		if !d.o.Strict {
			// Strict mode pulls no task ahead: one pulled ahead could
			// start before a more urgent one of the same round.
			d.slots.ahead = aheadFor(d.slots.size, aheadCap(d.o.MaxConcurrency, caps), d.rtt, d.inSlot)
		}
		free := d.slots.free()
		if free <= 0 || d.slots.queued > 0 && 2*free < d.slots.size+d.slots.ahead {
			// While tasks pulled ahead still wait, the slots do not
			// wait for a pull: the next round waits until it can ask
			// for half of what the slots and the queue take, rather
			// than pulling a few tasks at a time.
			return plans, start
		}
		alloc := d.sched.allocate(free, caps, d.sched.effective(d.o.now(), oldest))
		used := 0
		for _, p := range spool.Priorities {
			if alloc[p] == 0 {
				continue
			}
			for j, n := range d.splitLocked(p, alloc[p], laneCaps) {
				if n > 0 {
					i := laneOf(j, p)
					used += n
					d.lanes[i].woken = false
					d.slots.reserve(n, false)
					plans = append(plans, d.pl.planLocked(i, n, false))
				}
			}
		}
		if used == free {
			return plans, start // every free slot is wanted: no spare capacity to long-poll
		}
	}
	// Spare capacity: long-poll every lane with no known work, the most
	// urgent priorities first. When that is more lanes than the spare
	// slots, long-poll the most urgent with half of the slots (at least
	// one, so a pull is always waiting, which the server's max-deliveries
	// advisories need) and keep the other half free for the lanes a
	// publish wakes; watchLocked watches every lane not long-polled.
	budget := d.slots.spare()
	if d.wk.on && d.idleLocked(laneCaps, resting) > budget {
		polling := 0
		for i := range d.lanes {
			if d.pl.polling(i) {
				polling++
			}
		}
		budget = min(budget, max(1, (budget+polling)/2)-polling)
	}
	for _, p := range spool.Priorities {
		for g := range d.groups {
			if budget <= 0 {
				return plans, start
			}
			i := laneOf(g, p)
			if d.pl.outstanding(i) || laneCaps[i] > 0 || resting[i] {
				continue
			}
			d.slots.reserve(1, true)
			budget--
			plans = append(plans, d.pl.planLocked(i, 1, true))
		}
	}
	return plans, start
}

// splitLocked splits the n slots the scheduler gave priority p over its
// lanes (one per lane group): one at a time, round robin from where the
// last split of p stopped, each lane up to its cap in laneCaps (the tasks
// known to wait in it). It returns the slots of each lane group. d.mu is
// held.
func (d *dispatcher) splitLocked(p spool.Priority, n int, laneCaps []int) []int {
	k := d.groups
	out := d.split[:k]
	clear(out)
	j := d.spread[p] % k
	for ; n > 0; n-- {
		next := -1
		for d := range k {
			if c := (j + d) % k; out[c] < laneCaps[laneOf(c, p)] {
				next = c
				break
			}
		}
		if next < 0 {
			break
		}
		out[next]++
		j = (next + 1) % k
	}
	d.spread[p] = j
	return out
}

// backlogLocked sums the lanes' backlogs per priority, with the oldest
// waiting task of each (zero: none known). d.mu is held.
func (d *dispatcher) backlogLocked() (backlog [numPriorities]uint64, oldest [numPriorities]time.Time) {
	for i := range d.lanes {
		st := &d.lanes[i]
		p := lanePriority(i)
		backlog[p] += st.pending
		if o := st.oldest; !o.IsZero() && (oldest[p].IsZero() || o.Before(oldest[p])) {
			oldest[p] = o
		}
	}
	return backlog, oldest
}
