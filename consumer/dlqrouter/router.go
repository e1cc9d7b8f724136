package dlqrouter

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	spool "github.com/spoolq/spool/shared"
	"github.com/spoolq/spool/shared/fleet"
	"github.com/spoolq/spool/shared/lifecycle"
	"github.com/spoolq/spool/shared/logging"
)

// Router defaults. Each is documented at its option.
const (
	DefaultBatch      = 16
	DefaultFetchWait  = 5 * time.Second
	DefaultTimeout    = 10 * time.Second
	DefaultRetryDelay = time.Second
	// maxRouterRetryDelay caps the backoff of a failing advisory and of a
	// failing pull.
	maxRouterRetryDelay = 30 * time.Second
)

// routerMaxDeliverError is the Spool-Error of a task the router dead-letters.
const routerMaxDeliverError = "deliveries exhausted without a verdict (worker crashed or timed out %d times)"

// Router errors.
var (
	// ErrStopped is returned by Start on a router that was stopped: a
	// Router runs once; make a new one to run again.
	ErrStopped = errors.New("dlq router already stopped")
	// ErrBadAdvisory marks an advisory the router cannot act on. It is
	// acknowledged (dropped) and counted in fleet.RouterStats.Bad.
	ErrBadAdvisory = errors.New("bad MAX_DELIVERIES advisory")
)

// Router moves tasks that ran out of deliveries to the dead-letter stream.
//
// A task that kills or stalls its worker on every attempt never gets a
// verdict: it reaches the consumer's MaxDeliver and stays in the WorkQueue
// task stream, where nothing will deliver it again. The server then emits a
// MAX_DELIVERIES advisory, which the advisory stream keeps. The router pulls
// those advisories from its durable consumer (names.RouterConsumer() on
// names.AdvisoryStream()) in small batches and, for each:
//
//  1. reads the task by sequence from the task stream; when it is gone (the
//     worker or another router handled it), the advisory is acknowledged;
//  2. publishes it to the dead-letter stream with reason max_deliver, the
//     advisory's delivery count as Spool-Attempts and Nats-Msg-Id
//     dlq-<taskstream>-<seq> (dlq.Publish);
//  3. writes the dead result document and releases the unique key
//     (results.Store.Dead);
//  4. deletes the task from the task stream;
//  5. acknowledges the advisory.
//
// Each step is idempotent, so any number of routers may share the consumer
// and a crash between steps only repeats them: the dead letter is stored once
// (within the dead-letter stream's duplicate window). A transient failure
// naks the advisory with a growing delay; an advisory is only dropped when it
// cannot be acted on (ErrBadAdvisory: not JSON, no sequence, another
// stream, a schedule). A task on a subject that is not a task subject is still
// dead-lettered under spool.dlq.<priority>.unknown (see dlq.SubjectFor); one
// on a schedule subject is never touched, since no Spool consumer delivers
// those and such an advisory cannot be genuine.
//
// Start, Stop and Stopped follow the worker's lifecycle; Run wraps them for
// callers that block. A Router runs once.
type Router struct {
	js         jetstream.JetStream
	names      spool.Names
	logger     *slog.Logger
	worker     string
	batch      int
	fetchWait  time.Duration
	timeout    time.Duration
	retryDelay time.Duration
	quiet      bool // no dead events (WithEvents(false))
	// unservedAfter is how long a task of a type nobody serves may wait
	// before it is dead-lettered (WithUnservedDeadline); 0: for good.
	unservedAfter time.Duration

	life       lifecycle.Lifecycle
	softCancel context.CancelFunc // stops pulling; set by start
	hardCancel context.CancelFunc // aborts the advisory in hand; set by start
	done       chan struct{}      // closed when the loop has ended
	err        error              // why the loop ended, if not a stop; set before done closes

	routed, gone, bad, failed atomic.Uint64
}

// New returns a DLQ router using nc, which stays the caller's: the
// router never closes it. The topology must be provisioned
// (streams.Provision) before Start.
func New(nc *nats.Conn, opts ...Option) (*Router, error) {
	if nc == nil {
		return nil, errors.New("new dlq router: nil *nats.Conn")
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("new dlq router: %w", err)
	}
	r := &Router{
		js:         js,
		names:      spool.DefaultNames(),
		logger:     logging.OrDefault(nil),
		worker:     defaultRouterWorker(),
		batch:      DefaultBatch,
		fetchWait:  DefaultFetchWait,
		timeout:    DefaultTimeout,
		retryDelay: DefaultRetryDelay,
		done:       make(chan struct{}),

		unservedAfter: DefaultUnservedDeadline,
	}
	for _, o := range opts {
		if err := o(r); err != nil {
			return nil, fmt.Errorf("new dlq router: %w", err)
		}
	}
	r.logger = r.logger.With("component", "dlq_router")
	return r, nil
}

func defaultRouterWorker() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "unknown"
	}
	return "dlq-router@" + host + "-" + strconv.Itoa(os.Getpid())
}

// Start binds the task stream, the router's consumer and the buckets, then
// routes advisories in a goroutine until Stop. As with Worker.Start, ctx
// bounds start-up only. Start returns an error when the topology is missing;
// the router then never runs. Calling Start on a running router does
// nothing; on a stopped one (or one that ended by itself) it returns
// ErrStopped.
func (r *Router) Start(ctx context.Context) error {
	err := r.life.Start(ctx, r.start)
	if errors.Is(err, lifecycle.ErrStopped) || err == nil && r.life.IsStopping() {
		return ErrStopped
	}
	return err
}

func (r *Router) start(ctx context.Context) error {
	b, err := r.bind(ctx)
	if err != nil {
		return err
	}
	ioCtx := context.WithoutCancel(ctx)
	softCtx, softCancel := context.WithCancel(ioCtx)
	// The advisory in hand is not interrupted by a graceful stop (it is
	// bounded by the router timeout), only by Stop's deadline.
	hardCtx, hardCancel := context.WithCancel(ioCtx)
	r.softCancel, r.hardCancel = softCancel, hardCancel
	go func() {
		defer close(r.done)
		defer hardCancel()
		defer softCancel()
		r.err = r.loop(softCtx, hardCtx, b)
		if r.err != nil {
			r.life.Ended() // ended by itself; a Stop under way ends it anyway
		}
	}()
	r.logger.InfoContext(ctx, "dlq router started", "stream", r.names.AdvisoryStream(),
		"consumer", r.names.RouterConsumer(), "worker", r.worker)
	return nil
}

// Stop stops pulling, lets the advisory in hand finish, and waits for the
// router to end. When ctx ends first, the advisory in hand is aborted (it
// will be redelivered) and Stop returns ctx's error once the router ended.
// Stop is idempotent and may be called on a router that never started.
func (r *Router) Stop(ctx context.Context) error {
	err := r.life.Stop(ctx, r.shutdown, r.abort)
	if err != nil {
		<-r.life.Stopped()
		return fmt.Errorf("stopping dlq router: %w", err)
	}
	return nil
}

// shutdown ends a running router gracefully: no more pulls, the advisory in
// hand finishes.
func (r *Router) shutdown() {
	r.softCancel()
	<-r.done
}

// abort makes a graceful stop hard: the advisory in hand is abandoned.
func (r *Router) abort() { r.hardCancel() }

// Stopped is closed when the router has ended: after Stop, when start-up
// failed, or when the connection closed for good (see Err).
func (r *Router) Stopped() <-chan struct{} { return r.life.Stopped() }

// Run starts the router and blocks until ctx ends, then stops it
// gracefully, giving the advisory in hand up to the router timeout. It
// returns nil after a stop caused by ctx, and an error when the router could
// not start or ended on its own (connection closed).
func (r *Router) Run(ctx context.Context) error {
	if err := r.Start(ctx); err != nil {
		return err
	}
	select {
	case <-r.Stopped():
		return r.Err()
	case <-ctx.Done():
	}
	stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.timeout)
	defer cancel()
	return r.Stop(stopCtx)
}

// Err returns why the router ended by itself (the connection closed for
// good), or nil. It is meaningful once Stopped is closed.
func (r *Router) Err() error {
	select {
	case <-r.life.Stopped():
		return r.err // written before the loop ended
	default:
		return nil
	}
}

// Stats returns the router's counters.
func (r *Router) Stats() fleet.RouterStats {
	return fleet.RouterStats{
		Routed: r.routed.Load(),
		Gone:   r.gone.Load(),
		Bad:    r.bad.Load(),
		Failed: r.failed.Load(),
	}
}
