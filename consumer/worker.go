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

	"github.com/spoolq/spool/consumer/internal/results"
	spool "github.com/spoolq/spool/shared"
	"github.com/spoolq/spool/shared/jsproto"
	"github.com/spoolq/spool/shared/lifecycle"
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
	nc  *nats.Conn
	h   Handler
	o   config
	log *slog.Logger
	rec *recorder
	// disp pulls tasks into the slots and runs their attempts.
	disp *dispatcher

	// life runs Start and Stop; stopping is its Stopping channel, closed
	// by Stop: no more pulls.
	life     *lifecycle.Lifecycle
	stopping <-chan struct{}
	mu       sync.Mutex
	state    WorkerState

	// Set by Start: the features and the stages of an attempt (see
	// attempt.go), and the pipeline that acks completed tasks once their
	// result is stored.
	js      jetstream.JetStream
	ioCtx   context.Context // values of Start's ctx, never cancelled
	cancels *cancels
	flow    *flowControl
	pauses  *pauses
	admit   *admission
	run     *running
	pipe    *pipeline
	// abort ends when Stop's ctx ends before the shutdown is done: the
	// shutdown then stops waiting for the server.
	abort     context.Context
	abortStop context.CancelFunc
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
		rec:      newRecorder(),
		life:     life,
		stopping: life.Stopping(),
		state:    WorkerNew,
	}
	w.disp = newDispatcher(&w.o, w.log, w.stopping)
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
	if errors.Is(err, lifecycle.ErrStopped) || err == nil && w.disp.isStopping() {
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
	bind := jsproto.Tries{PerTry: min(w.o.IOTimeout, jsproto.DefaultPerTry), Logger: w.log, Conn: w.nc}
	if err := w.disp.bindPartitions(ctx, js, bind, w.h); err != nil {
		return err
	}
	var res *results.Store
	err = bind.Do(ctx, "binding the results and unique-key buckets", func(ctx context.Context) (err error) {
		res, err = results.New(ctx, js, names, w.o.WorkerName)
		if err == nil {
			res.SetEvents(w.o.Events)
		}
		return err
	})
	if err != nil {
		return bindError("KV buckets", names.ResultsBucket()+", "+names.UniqueBucket(), err)
	}
	if w.cancels, err = newCancels(ctx, w.nc, js, names, bind, w.log); err != nil {
		return err
	}
	w.ioCtx = context.WithoutCancel(ctx)
	if err := w.startStages(ctx, res); err != nil {
		return err
	}
	if err := w.disp.begin(w.nc, w.ioCtx, w.run.hard, w.admit.attempt, func() { w.cancels.reload(w.ioCtx, w.o.IOTimeout) }); err != nil {
		w.pipe.close()
		w.pauses.close()
		w.flow.close()
		return err
	}

	w.mu.Lock()
	w.abort, w.abortStop = context.WithCancel(w.ioCtx)
	w.state = WorkerIdle
	w.mu.Unlock()
	w.disp.run()
	w.log.InfoContext(ctx, "worker started", "min_slots", w.o.MinConcurrency, "max_slots", w.o.MaxConcurrency, "strict", w.o.Strict,
		"partitions", w.disp.parts, "types", w.disp.patterns)
	return nil
}

// startStages binds the features (workflow steps, flow control, type
// pauses) and wires the stages of an attempt and the completion pipeline.
func (w *Worker) startStages(ctx context.Context, res *results.Store) error {
	d := w.disp
	io := &taskIO{
		js: w.js, names: w.o.Names, log: w.log, rec: w.rec, ctx: w.ioCtx,
		ackWait: d.ackWait, ioTimeout: w.o.IOTimeout, perTry: writePerTry(w.o.IOTimeout),
	}
	steps, err := openSteps(ctx, io, &w.o)
	if err != nil {
		return err
	}
	flow, err := startFlowControl(ctx, io, w.nc, d.tasks, w.o.WorkerName)
	if err != nil {
		return err
	}
	d.holdRates(flow)
	w.mu.Lock()
	w.flow = flow // read by Stats
	w.mu.Unlock()
	flow.followRules(ctx, d.capLanes)
	if w.pauses, err = startPauses(ctx, io, w.nc, d.tasks, w.cancels); err != nil {
		flow.close()
		return err
	}
	settle := &settling{io: io, policy: &w.o, results: res, cancels: w.cancels, steps: steps, turns: flow, maxDeliver: d.maxDeliver}
	if settle.pipe, err = newPipeline(w.nc, io, res, &w.o, &d.attempts, settle); err != nil {
		w.pauses.close()
		flow.close()
		return err
	}
	w.pipe = settle.pipe
	run := &running{
		io: io, h: w.h, steps: steps, results: res, cancels: w.cancels, settle: settle,
		processingDelay: w.o.ProcessingDelay, watches: make(map[*watch]struct{}),
	}
	run.hard, run.hardCancel = context.WithCancel(w.ioCtx)
	run.base = handlerBase(run.hard)
	settle.hard = run.hard
	hard := run.hard
	context.AfterFunc(hard, func() { run.endHandlers(context.Cause(hard)) })
	w.run = run
	w.admit = &admission{
		io: io, tasks: d.tasks, nc: w.nc, policy: &w.o, results: res, cancels: w.cancels, flow: flow,
		gates: []gate{w.pauses, steps, flow}, run: run, settle: settle, maxDeliver: d.maxDeliver,
		replicated: d.tasks.CachedInfo().Config.Replicas > 1,
	}
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
	if w.abortStop != nil {
		w.abortStop()
	}
	w.run.cancelHandlers()
}

// Stopped is closed once the worker has stopped.
func (w *Worker) Stopped() <-chan struct{} { return w.life.Stopped() }

// shutdown runs once, after stopping was closed, on a started worker; the
// worker has stopped when it returns.
func (w *Worker) shutdown() {
	w.mu.Lock()
	w.state = WorkerStopping
	w.mu.Unlock()
	d := w.disp
	d.stopPulling()
	drained := make(chan struct{})
	go func() {
		d.attempts.Wait()
		close(drained)
	}()
	timer := time.NewTimer(w.o.ShutdownTimeout)
	select {
	case <-drained:
	case <-timer.C:
		w.log.Warn("shutdown timeout: cancelling running handlers and handing their tasks back", "timeout", w.o.ShutdownTimeout)
	case <-w.run.hard.Done():
	}
	timer.Stop()
	w.run.cancelHandlers()
	d.handBackQueued()
	d.pulls.Wait()
	d.attempts.Wait()
	<-drained
	// No attempt runs and the pipeline is empty.
	w.pipe.close()
	d.pl.close()
	d.runners.Wait()
	w.flow.close()
	w.pauses.close()
	ctx, cancel := context.WithTimeout(w.abort, w.o.IOTimeout)
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

// State returns the lifecycle state.
func (w *Worker) State() WorkerState {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.stateLocked()
}

func (w *Worker) stateLocked() WorkerState {
	if w.state == WorkerNew && w.disp.isStopping() {
		return WorkerStopped // stopped before it started
	}
	if w.state == WorkerIdle && w.disp.busy() > 0 {
		return WorkerBusy
	}
	return w.state
}

// Stats returns a snapshot of the counters and the pool.
func (w *Worker) Stats() Stats {
	prio, types := w.rec.snapshot()
	w.mu.Lock()
	fc := w.flow // set during Start
	state := w.stateLocked()
	w.mu.Unlock()
	s := Stats{
		Worker:   w.o.WorkerName,
		State:    state,
		MinSlots: w.o.MinConcurrency,
		MaxSlots: w.o.MaxConcurrency,
		Types:    types,
		Flow:     fc.stats(),
	}
	w.disp.stats(&s, prio, w.o.now())
	return s
}
