package consumer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/spoolq/spool/consumer/flow"
	"github.com/spoolq/spool/consumer/internal/results"
	"github.com/spoolq/spool/consumer/parking"
	spool "github.com/spoolq/spool/shared"
	"github.com/spoolq/spool/shared/jsproto"
	"github.com/spoolq/spool/shared/lifecycle"
	"github.com/spoolq/spool/shared/limits"
	"github.com/spoolq/spool/shared/workflow"
	"github.com/spoolq/spool/streams"
)

// WorkerState is the lifecycle state of a Worker.
type WorkerState string

// Worker states.
const (
	WorkerNew      WorkerState = "new"      // created, not started
	WorkerIdle     WorkerState = "idle"     // started, no handler running
	WorkerBusy     WorkerState = "busy"     // at least one handler running
	WorkerStopping WorkerState = "stopping" // Stop called: not pulling, finishing
	WorkerStopped  WorkerState = "stopped"  // everything handed back or done
)

// Worker pulls tasks from the per-priority consumers of every task
// partition (or of one: WithPartition) and runs them through a Handler in
// a bounded, autoscaled pool of slots shared by all of them. Create one with New,
// run it with Start and end it with Stop. It never closes the connection it
// was given.
type Worker struct {
	nc    *nats.Conn
	h     Handler
	o     config
	log   *slog.Logger
	sched *scheduler
	rec   *recorder

	// Set by Start.
	js jetstream.JetStream
	// tasks is SPOOL_TASKS (partition 0): where the held, parked and
	// schedule subjects are, whatever partitions the worker pulls.
	tasks jetstream.Stream
	// parts are the partitions pulled, in order; lanes are their priority
	// consumers (laneOf).
	parts      []int
	lanes      []lane
	maxDeliver [numPriorities]int           // 0: unlimited; the lowest of the partitions'
	maxAckPend [numPriorities]int           // 0: unlimited; the lowest of the partitions'
	ackWait    [numPriorities]time.Duration // the shortest of the partitions'
	results    *results.Store
	cancels    *cancels
	reconnects uint64             // the connection's reconnect count at the last cancel load
	wf         *workflow.Store    // nil without a workflows bucket
	flow       *flow.Limiter      // nil: flow control off
	turns      *limits.Turns      // per-key ordering; nil: flow control off
	kickSub    *nats.Subscription // the fleet's kick requests (spool.kick.>); nil: flow control off
	kickSem    chan struct{}      // bounds the kicks served at once
	kicking    sync.WaitGroup     // kicks being served
	sweepStop  chan struct{}      // ends sweepHeld; nil: flow control off
	sweepDone  chan struct{}
	parking    *parking.Parking // nil: type pauses off
	ioCtx      context.Context  // values of Start's ctx, never cancelled

	// life runs Start and Stop; stopping is its Stopping channel, closed
	// by Stop: no more pulls.
	life     *lifecycle.Lifecycle
	stopping <-chan struct{}
	// hardCtx ends running handlers (through endHandlers) when the
	// shutdown timeout runs out; hardCancel ends it. handlerBase, its
	// values without its cancellation, is the parent of every handler
	// context.
	hardCtx     context.Context
	hardCancel  context.CancelFunc
	handlerBase context.Context
	// abortCtx ends when Stop's ctx ends before the shutdown is done:
	// the shutdown then stops waiting for the server.
	abortCtx context.Context
	abort    context.CancelFunc
	// watches are the running attempts' timers, for cancelHandlers.
	watchMu sync.Mutex
	watches map[*watch]struct{}
	// wake nudges the dispatcher (capacity 1, never closed).
	wake chan struct{}
	// loops counts the dispatcher and refresher goroutines; pulls counts
	// outstanding pull requests; attempts counts running attempts and
	// completions in the pipeline.
	loops, pulls, attempts sync.WaitGroup
	// pipe acks completed tasks once their result is stored.
	pipe *pipeline
	// pl sends pull requests and receives the tasks they bring.
	pl *puller
	// runq hands pulled tasks to idle runner goroutines (unbuffered: a
	// send succeeds only when a runner waits); runners counts them.
	runq    chan job
	runners sync.WaitGroup

	mu    sync.Mutex
	state WorkerState
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
}

// lane is one priority consumer of one task partition: what the worker
// pulls from. Its state is guarded by the worker's mu.
type lane struct {
	stream jetstream.Stream // the partition's stream
	cons   jetstream.Consumer
	prioState
}

// prioState is what the worker knows about one lane (a priority of a
// partition).
type prioState struct {
	// busy is the slots running an attempt of the lane's tasks.
	busy int
	// pending is the consumer's NumPending at the last pull or refresh:
	// tasks never delivered. 0 means the priority looks empty.
	pending uint64
	// maybe is set by a refresh when tasks are delivered but not acked
	// beyond this worker's own: some may be due for redelivery, which
	// NumPending does not count.
	maybe bool
	// oldest is the stream time of the oldest waiting task at the last
	// refresh; zero when none or unknown.
	oldest time.Time
	// ackPendingHigh is set while the consumer's unacked tasks (running
	// and in retry backoff) are near MaxAckPending, past which the server
	// stops delivering the priority.
	ackPendingHigh bool
	// restUntil pauses pulls of the priority after a failed one.
	restUntil time.Time
	// paused is set while the priority's consumer is paused (an operator's
	// pause, read at each refresh): nothing is pulled, so no slot waits
	// on it.
	paused bool
}

// New returns a Worker that runs tasks through h (usually a *Mux). nc must
// stay open until the worker has stopped.
func New(nc *nats.Conn, h Handler, opts ...Option) (*Worker, error) {
	if nc == nil {
		return nil, fmt.Errorf("%w: nil connection", ErrInvalidOption)
	}
	if h == nil {
		return nil, fmt.Errorf("%w: nil handler", ErrInvalidOption)
	}
	o := defaultConfig()
	for _, opt := range opts {
		if err := opt(&o); err != nil {
			return nil, err
		}
	}
	if o.now == nil {
		o.now = time.Now
	}
	if err := o.validate(); err != nil {
		return nil, err
	}
	life := new(lifecycle.Lifecycle)
	w := &Worker{
		nc:       nc,
		h:        h,
		o:        o,
		log:      o.Logger.With("worker", o.WorkerName),
		sched:    newScheduler(o),
		rec:      newRecorder(),
		life:     life,
		stopping: life.Stopping(),
		runq:     make(chan job),
		wake:     make(chan struct{}, 1),
		watches:  make(map[*watch]struct{}),
		state:    WorkerNew,
		slots:    newSlots(o.MinConcurrency, o.MaxConcurrency),
	}
	return w, nil
}

// Start binds the task streams and the five priority consumers of every
// task partition (or of the one WithPartition pins) and the buckets, then
// starts pulling. ctx bounds start-up only; the worker runs until
// Stop. Each look-up is bounded by a short per-try timeout and retried
// through a leader election until the cluster answers or ctx ends, so give
// ctx the deadline start-up may take (minutes); a missing stream or
// consumer fails at once. Start is idempotent: later calls return the first call's result.
// After Stop it returns ErrStopped.
func (w *Worker) Start(ctx context.Context) error {
	err := w.life.Start(ctx, w.start)
	if errors.Is(err, lifecycle.ErrStopped) || err == nil && w.isStopping() {
		return ErrStopped
	}
	return err
}

func (w *Worker) start(ctx context.Context) error {
	js, err := jetstream.New(w.nc,
		jetstream.WithPublishAsyncErrHandler(func(_ jetstream.JetStream, m *nats.Msg, err error) {
			w.log.Warn("result write failed", "subject", m.Subject, "error", err)
		}),
		// Every asynchronous write resolves: one whose acknowledgement
		// does not come (a closed connection never answers) fails after
		// IOTimeout instead of holding its place forever.
		jetstream.WithPublishAsyncTimeout(w.o.IOTimeout),
	)
	if err != nil {
		return fmt.Errorf("creating JetStream context: %w", err)
	}
	w.js = js
	names := w.o.Names
	// Each look-up rides out an election: tried again until the cluster
	// answers or ctx ends, saying what it waits for now and then. A
	// missing stream or consumer fails at once.
	bind := jsproto.Retry{PerTry: min(w.o.IOTimeout, jsproto.DefaultPerTry), Logger: w.log, Conn: w.nc}
	if err := w.bindPartitions(ctx, bind); err != nil {
		return err
	}
	err = bind.Do(ctx, "binding the results and unique-key buckets", func(ctx context.Context) (err error) {
		w.results, err = results.New(ctx, js, names, w.o.WorkerName)
		if err == nil {
			w.results.SetEvents(w.o.Events)
		}
		return err
	})
	if err != nil {
		return bindError("KV buckets", names.ResultsBucket()+", "+names.UniqueBucket(), err)
	}
	w.reconnects = w.nc.Stats().Reconnects
	if w.cancels, err = newCancels(ctx, w.nc, js, names, bind, w.log); err != nil {
		return err
	}
	w.ioCtx = context.WithoutCancel(ctx)
	if err := w.bindWorkflows(ctx); err != nil {
		return err
	}
	if err := w.startFlow(ctx); err != nil {
		return err
	}
	if err := w.startParking(ctx); err != nil {
		w.closeFlow()
		return err
	}
	if w.pipe, err = newPipeline(w); err != nil {
		w.parking.Close()
		w.closeFlow()
		return err
	}
	if w.pl, err = newPuller(w); err != nil {
		w.pipe.close()
		w.parking.Close()
		w.closeFlow()
		return err
	}

	w.mu.Lock()
	w.hardCtx, w.hardCancel = context.WithCancel(w.ioCtx)
	w.handlerBase = context.WithoutCancel(w.hardCtx)
	w.abortCtx, w.abort = context.WithCancel(w.ioCtx)
	hard := w.hardCtx
	context.AfterFunc(hard, func() { w.endHandlers(context.Cause(hard)) })
	w.state = WorkerIdle
	w.slots.startWindow(time.Now())
	for i := range w.lanes {
		w.lanes[i].maybe = true // unknown until the first pull
	}
	w.mu.Unlock()

	w.loops.Add(2)
	go w.dispatchLoop()
	go w.refreshLoop()
	w.log.InfoContext(ctx, "worker started", "min_slots", w.o.MinConcurrency, "max_slots", w.o.MaxConcurrency, "strict", w.o.Strict,
		"partitions", w.parts)
	return nil
}

// bindError is the error of a start-up look-up of the kind object name: a
// missing one (a real 404) is a *spool.NotProvisionedError, which says to
// provision it; the cluster not answering in time says so
// (jsproto.ErrUnavailable).
func bindError(kind, name string, err error) error {
	if jsproto.NotFound(err) {
		return &spool.NotProvisionedError{Kind: kind, Name: name, Err: err}
	}
	return fmt.Errorf("binding %s %q: %w", kind, name, err)
}

// Stop stops pulling, lets running handlers finish for up to the shutdown
// timeout (or until ctx ends, whichever is first), along with the tasks
// pulled ahead and waiting for a slot, then cancels the handlers still
// running and hands their tasks, and those still waiting, back at once
// (NAK without delay) so another worker takes them. It returns when everything is done,
// or ctx.Err() when ctx ends first (the hand-back still completes in the
// background, no longer waiting for the server to confirm the last writes;
// wait on Stopped). A ctx that is already done makes Stop a
// hard stop: running handlers are cancelled and their tasks handed back at
// once. Stop is idempotent and safe before Start; it never closes the
// connection.
func (w *Worker) Stop(ctx context.Context) error {
	return w.life.Stop(ctx, w.shutdown, w.hardStop)
}

// hardStop runs when Stop's ctx ends first: running handlers are
// cancelled, and the shutdown stops waiting for the server, which may be
// gone.
func (w *Worker) hardStop() {
	w.abort()
	w.cancelHandlers()
}

// Stopped is closed once the worker has stopped.
func (w *Worker) Stopped() <-chan struct{} { return w.life.Stopped() }

// shutdown runs once, after stopping was closed, on a started worker; the
// worker has stopped when it returns.
func (w *Worker) shutdown() {
	// Taken after stopping closed: a pull that took a slot under the lock
	// before has done its attempts.Add, and later pulls see stopping.
	w.mu.Lock()
	w.state = WorkerStopping
	w.mu.Unlock()
	w.loops.Wait()
	// No request is sent any more. The no-wait fetches out end within a
	// round trip: wait for them, so the tasks they bring are handed back
	// while the subscription still takes them (once it is gone, a task
	// sent to it stays unacknowledged until its AckWait runs out). Then
	// give up the requests still out, long-polls (a task one still brings
	// is handed back at once).
	w.awaitFetches()
	w.pl.expire(true)
	drained := make(chan struct{})
	go func() {
		w.attempts.Wait()
		close(drained)
	}()
	timer := time.NewTimer(w.o.ShutdownTimeout)
	select {
	case <-drained:
	case <-timer.C:
		w.log.Warn("shutdown timeout: cancelling running handlers and handing their tasks back", "timeout", w.o.ShutdownTimeout)
	case <-w.hardCtx.Done():
	}
	timer.Stop()
	w.cancelHandlers()
	w.handBackQueued()
	w.pulls.Wait()
	w.attempts.Wait()
	<-drained
	// No attempt runs and the pipeline is empty.
	w.pipe.close()
	w.pl.close()
	w.runners.Wait()
	w.closeFlow()
	w.parking.Close()
	ctx, cancel := context.WithTimeout(w.abortCtx, w.o.IOTimeout)
	if err := w.nc.FlushWithContext(ctx); err != nil && !errors.Is(err, nats.ErrConnectionClosed) {
		w.log.Warn("flushing acks at shutdown", "error", err)
	}
	select {
	case <-w.js.PublishAsyncComplete():
	case <-ctx.Done():
		w.log.Warn("result writes still pending at shutdown", "pending", w.js.PublishAsyncPending())
	}
	cancel()
	w.cancels.close()
	w.mu.Lock()
	w.state = WorkerStopped
	w.mu.Unlock()
	w.log.Info("worker stopped")
}

// awaitFetches waits, for pullAnswerWait at most, until no no-wait fetch
// is out. The dispatcher has stopped: a request that ends nudges w.wake,
// which only this wait reads now.
func (w *Worker) awaitFetches() {
	timer := time.NewTimer(pullAnswerWait)
	defer timer.Stop()
	for {
		w.mu.Lock()
		fetching := w.slots.fetching > 0
		w.mu.Unlock()
		if !fetching {
			return
		}
		select {
		case <-w.wake:
		case <-timer.C:
			return
		}
	}
}

// State returns the lifecycle state.
func (w *Worker) State() WorkerState {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.stateLocked()
}

func (w *Worker) stateLocked() WorkerState {
	if w.state == WorkerNew && w.isStopping() {
		return WorkerStopped // stopped before it started
	}
	if w.state == WorkerIdle && w.slots.busy > 0 {
		return WorkerBusy
	}
	return w.state
}

// Stats returns a snapshot of the counters and the pool.
func (w *Worker) Stats() Stats {
	prio, types := w.rec.snapshot()
	w.mu.Lock()
	limiter := w.flow // set during Start
	w.mu.Unlock()
	var flowStats map[string]flow.TypeStats
	if limiter != nil {
		flowStats = limiter.Stats()
	}
	now := w.o.now()
	w.mu.Lock()
	defer w.mu.Unlock()
	s := Stats{
		Worker:     w.o.WorkerName,
		State:      w.stateLocked(),
		Slots:      w.slots.size,
		Busy:       w.slots.busy,
		Idle:       w.slots.idle(),
		Queued:     w.slots.queued,
		MinSlots:   w.o.MinConcurrency,
		MaxSlots:   w.o.MaxConcurrency,
		ScaleUps:   w.slots.scaleUps,
		ScaleDowns: w.slots.scaleDowns,
		Types:      types,
		Flow:       flowStats,
	}
	backlog, oldest := w.backlogLocked()
	for _, p := range spool.Priorities {
		ps := PriorityStats{
			Priority: p,
			Counters: prio[p],
			Busy:     w.slots.prio[p],
			Backlog:  backlog[p],
			Boost:    1,
			Weight:   w.o.Weights[p],
		}
		if o := oldest[p]; !o.IsZero() {
			ps.OldestWait = now.Sub(o)
			ps.Boost = boostFor(w.o.Boost, ps.OldestWait)
			ps.Weight *= ps.Boost
		}
		s.Priorities = append(s.Priorities, ps)
	}
	return s
}

func (w *Worker) nudge() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

func (w *Worker) isStopping() bool {
	select {
	case <-w.stopping:
		return true
	default:
		return false
	}
}

// dispatchLoop hands free slots to pulls whenever something changes: a slot
// frees, a pull returns, a refresh learns of a backlog.
func (w *Worker) dispatchLoop() {
	defer w.loops.Done()
	for {
		plans, start := w.dispatch()
		for _, j := range start {
			w.startAttempt(j.lane, j.msg)
		}
		w.pl.send(plans)
		select {
		case <-w.wake:
		case <-w.stopping:
			return
		}
	}
}

// dispatch plans pulls under the lock; the caller sends them.
//
// Slots go first to priorities known to have work, in any partition:
// the scheduler splits the free slots over the priorities, and each
// priority's share is split over its partitions' lanes with work
// (splitLocked), as no-wait fetches. When slots are left over (no lane is
// known to have work, or what is known is fewer tasks than free slots),
// every other lane gets a long-poll, the most urgent priorities' first: a
// single-message pull that reserves a slot out of MaxConcurrency, so a
// message it brings always has a slot.
func (w *Worker) dispatch() (plans []pullPlan, start []job) {
	if w.isStopping() {
		return nil, nil
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	var caps [numPriorities]int
	_, oldest := w.backlogLocked()
	laneCaps, resting := w.laneCaps, w.resting
	known := false
	now := time.Now()
	for i := range w.lanes {
		st := &w.lanes[i]
		p := lanePriority(i)
		resting[i] = now.Before(st.restUntil) || st.paused
		laneCaps[i] = 0
		switch {
		case resting[i]:
		case w.pl.polling(i):
		case st.pending > 0:
			laneCaps[i] = int(min(st.pending, uint64(2*w.o.MaxConcurrency))) // what a round may ask for: the slots and as many ahead
		case st.maybe && !w.pl.outstanding(i):
			laneCaps[i] = 1
		}
		if laneCaps[i] > 0 {
			caps[p] = min(caps[p]+laneCaps[i], 2*w.o.MaxConcurrency)
			known = true
		}
	}
	if known {
		w.scaleUpLocked()
		start = w.startQueuedLocked()
		if w.slots.fetching > 0 {
			// One round of fetches at a time: slots freed meanwhile are
			// pulled together in the next round, in larger batches (the
			// server answers fetch requests one by one, so batches carry
			// the throughput).
			return nil, start
		}
		if !w.o.Strict {
			// Strict mode pulls no task ahead: one pulled ahead could
			// start before a more urgent one of the same round.
			w.slots.ahead = aheadFor(w.slots.size, w.o.MaxConcurrency, w.rtt, w.inSlot)
		}
		free := w.slots.free()
		if free <= 0 || w.slots.queued > 0 && 2*free < w.slots.size+w.slots.ahead {
			// While tasks pulled ahead still wait, the slots do not
			// wait for a pull: the next round waits until it can ask
			// for half of what the slots and the queue take, rather
			// than pulling a few tasks at a time.
			return nil, start
		}
		alloc := w.sched.allocate(free, caps, w.sched.effective(w.o.now(), oldest))
		used := 0
		for _, p := range spool.Priorities {
			if alloc[p] == 0 {
				continue
			}
			for j, n := range w.splitLocked(p, alloc[p], laneCaps) {
				if n > 0 {
					used += n
					w.slots.reserve(n, false)
					plans = append(plans, w.pl.planLocked(laneOf(j, p), n, false))
				}
			}
		}
		if used == free {
			return plans, start // every free slot is wanted: no spare capacity to long-poll
		}
	}
	// Spare capacity: long-poll every lane with no known work, the most
	// urgent priorities first.
	budget := w.slots.spare()
	for _, p := range spool.Priorities {
		for j := range w.parts {
			if budget <= 0 {
				return plans, start
			}
			i := laneOf(j, p)
			if w.pl.outstanding(i) || laneCaps[i] > 0 || resting[i] {
				continue
			}
			w.slots.reserve(1, true)
			budget--
			plans = append(plans, w.pl.planLocked(i, 1, true))
		}
	}
	return plans, start
}

// splitLocked splits the n slots the scheduler gave priority p over its
// partitions' lanes: one at a time, round robin from where the last split
// of p stopped, each lane up to its cap in laneCaps (the tasks known to
// wait in it). It returns the slots of each partition, by index in parts.
// w.mu is held.
func (w *Worker) splitLocked(p spool.Priority, n int, laneCaps []int) []int {
	k := len(w.parts)
	out := w.split[:k]
	clear(out)
	j := w.spread[p] % k
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
	w.spread[p] = j
	return out
}

// backlogLocked sums the lanes' backlogs per priority, with the oldest
// waiting task of each (zero: none known). w.mu is held.
func (w *Worker) backlogLocked() (backlog [numPriorities]uint64, oldest [numPriorities]time.Time) {
	for i := range w.lanes {
		st := &w.lanes[i]
		p := lanePriority(i)
		backlog[p] += st.pending
		if o := st.oldest; !o.IsZero() && (oldest[p].IsZero() || o.Before(oldest[p])) {
			oldest[p] = o
		}
	}
	return backlog, oldest
}

// refreshLoop reads the backlog of priorities that have no long-poll
// outstanding, and reconsiders the pool size.
func (w *Worker) refreshLoop() {
	defer w.loops.Done()
	t := time.NewTicker(w.o.RefreshInterval)
	defer t.Stop()
	for {
		select {
		case <-w.stopping:
			return
		case <-t.C:
		}
		w.pl.expire(false)
		w.beatQueued()
		w.reloadCancels()
		w.refresh()
		w.scaleDown()
		w.nudge()
	}
}

// reloadCancels lists the cancelled tasks again after the connection
// reconnected: cancellations published while it was down were missed.
func (w *Worker) reloadCancels() {
	n := w.nc.Stats().Reconnects
	if n == w.reconnects {
		return
	}
	ctx, cancel := context.WithTimeout(w.ioCtx, w.o.IOTimeout)
	defer cancel()
	if err := w.cancels.load(ctx); err != nil {
		w.log.Warn("reloading cancelled tasks after a reconnect; trying again", "error", err)
		return
	}
	w.reconnects = n
}

func (w *Worker) refresh() {
	for i := range w.lanes {
		ln := &w.lanes[i] // stream and cons are fixed after Start
		p := lanePriority(i)
		w.mu.Lock()
		skip := w.pl.polling(i)
		local := ln.busy
		w.mu.Unlock()
		if skip {
			continue
		}
		ctx, cancel := context.WithTimeout(w.ioCtx, w.o.IOTimeout)
		info, err := ln.cons.Info(ctx)
		var oldest time.Time
		if err == nil && info.NumPending > 0 {
			oldest, err = streams.OldestWaiting(ctx, ln.stream, w.o.Names, p, info)
		}
		cancel()
		stream := ln.stream.CachedInfo().Config.Name
		if err != nil {
			if !w.isStopping() {
				w.log.Warn("reading consumer state", "stream", stream, "priority", p.String(), "error", err)
			}
			continue
		}
		w.mu.Lock()
		st := &ln.prioState
		if !w.pl.polling(i) {
			st.pending = info.NumPending
			st.maybe = info.NumAckPending > local
			st.oldest = oldest
		}
		pauseChanged := st.paused != info.Paused
		st.paused = info.Paused
		high := w.maxAckPend[p] > 0 && info.NumAckPending >= w.maxAckPend[p]*9/10
		warn := high && !st.ackPendingHigh
		st.ackPendingHigh = high
		w.mu.Unlock()
		if pauseChanged {
			w.log.Info("priority pause changed", "stream", stream, "priority", p.String(), "paused", info.Paused)
		}
		if warn {
			w.log.Warn("priority near MaxAckPending: tasks in retry backoff count against it, and at the limit the server delivers no fresh task of this priority; raise SPOOL_MAX_ACK_PENDING",
				"stream", stream, "priority", p.String(), "ack_pending", info.NumAckPending, "max_ack_pending", w.maxAckPend[p])
		}
	}
}
