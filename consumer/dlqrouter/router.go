package dlqrouter

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/spoolq/spool/consumer/internal/results"
	spool "github.com/spoolq/spool/shared"
	"github.com/spoolq/spool/shared/fleet"
	"github.com/spoolq/spool/shared/jsproto"
	"github.com/spoolq/spool/shared/lifecycle"
	"github.com/spoolq/spool/shared/limits"
	"github.com/spoolq/spool/shared/logging"
	"github.com/spoolq/spool/shared/workflow"
	"github.com/spoolq/spool/streams/dlq"
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

	life       lifecycle.Lifecycle
	softCancel context.CancelFunc // stops pulling; set by start
	hardCancel context.CancelFunc // aborts the advisory in hand; set by start
	done       chan struct{}      // closed when the loop has ended
	err        error              // why the loop ended, if not a stop; set before done closes

	routed, gone, bad, failed atomic.Uint64
}

// Option configures a Router.
type Option func(*Router) error

// WithNames sets the names (prefix) of the topology. Default:
// spool.DefaultNames().
func WithNames(names spool.Names) Option {
	return func(r *Router) error {
		if names.Prefix() == "" {
			return errors.New("WithNames: zero Names; build them with spool.NewNames")
		}
		r.names = names
		return nil
	}
}

// WithPrefix sets the topology's prefix, as WithNames with
// spool.NewNames(prefix).
func WithPrefix(prefix string) Option {
	return func(r *Router) error {
		names, err := spool.NewNames(prefix)
		if err != nil {
			return fmt.Errorf("WithPrefix: %w", err)
		}
		r.names = names
		return nil
	}
}

// WithLogger sets the logger. Default (and nil): warnings and errors on
// standard error (logging.OrDefault).
func WithLogger(l *slog.Logger) Option {
	return func(r *Router) error {
		r.logger = logging.OrDefault(l)
		return nil
	}
}

// WithWorker names the router in the result documents it writes.
// Default: dlq-router@<hostname>-<pid>.
func WithWorker(name string) Option {
	return func(r *Router) error {
		if strings.TrimSpace(name) == "" {
			return errors.New("WithWorker: empty name")
		}
		r.worker = name
		return nil
	}
}

// WithEvents sets whether the router publishes a dead event for each task
// it dead-letters (as consumer.WithEvents does for a worker). Default true.
func WithEvents(on bool) Option {
	return func(r *Router) error {
		r.quiet = !on
		return nil
	}
}

// WithBatch sets how many advisories one pull asks for, 1 to 256.
// Default: DefaultBatch (16).
func WithBatch(n int) Option {
	return func(r *Router) error {
		if n < 1 || n > 256 {
			return fmt.Errorf("WithBatch: %d must be 1 to 256", n)
		}
		r.batch = n
		return nil
	}
}

// WithFetchWait sets how long one pull waits for advisories, at least
// 100ms. Stop does not wait for it. Default: DefaultFetchWait (5s).
func WithFetchWait(d time.Duration) Option {
	return func(r *Router) error {
		if d < 100*time.Millisecond {
			return fmt.Errorf("WithFetchWait: %s must be at least 100ms", d)
		}
		r.fetchWait = d
		return nil
	}
}

// WithTimeout bounds the handling of one advisory (read, publish,
// result, delete, ack); it must stay well below the router consumer's
// AckWait (30s). Default: DefaultTimeout (10s).
func WithTimeout(d time.Duration) Option {
	return func(r *Router) error {
		if d < 100*time.Millisecond || d > 25*time.Second {
			return fmt.Errorf("WithTimeout: %s must be 100ms to 25s", d)
		}
		r.timeout = d
		return nil
	}
}

// WithRetryDelay sets the first redelivery delay of an advisory that
// hit a transient error; it doubles with each further failure up to 30s.
// Default: DefaultRetryDelay (1s).
func WithRetryDelay(d time.Duration) Option {
	return func(r *Router) error {
		if d < 10*time.Millisecond || d > maxRouterRetryDelay {
			return fmt.Errorf("WithRetryDelay: %s must be 10ms to %s", d, maxRouterRetryDelay)
		}
		r.retryDelay = d
		return nil
	}
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

// routerBinding is what one run of the router works on.
type routerBinding struct {
	tasks   jetstream.Stream
	parts   map[string]jetstream.Stream // task partitions after the first, by stream name
	cons    jetstream.Consumer
	results *results.Store
	wf      *workflow.Store // nil without a workflows bucket
	turns   *limits.Turns   // nil without a leases bucket (no flow control)
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

func (r *Router) bind(ctx context.Context) (routerBinding, error) {
	var b routerBinding
	// Each look-up rides out an election until ctx ends, saying what it
	// waits for now and then; a missing stream fails at once.
	retry := jsproto.Tries{PerTry: min(r.timeout, jsproto.DefaultPerTry), Logger: r.logger}
	var tasks jetstream.Stream
	err := retry.Do(ctx, "binding task stream "+r.names.TaskStream(), func(ctx context.Context) (err error) {
		tasks, err = r.js.Stream(ctx, r.names.TaskStream())
		return err
	})
	if err != nil {
		return b, fmt.Errorf("starting dlq router: binding task stream %q (is the topology provisioned?): %w", r.names.TaskStream(), err)
	}
	var cons jetstream.Consumer
	err = retry.Do(ctx, "binding consumer "+r.names.RouterConsumer(), func(ctx context.Context) (err error) {
		cons, err = r.js.Consumer(ctx, r.names.AdvisoryStream(), r.names.RouterConsumer())
		return err
	})
	if err != nil {
		return b, fmt.Errorf("starting dlq router: binding consumer %q on stream %q (is the topology provisioned?): %w",
			r.names.RouterConsumer(), r.names.AdvisoryStream(), err)
	}
	var store *results.Store
	err = retry.Do(ctx, "binding the results and unique-key buckets", func(ctx context.Context) (err error) {
		store, err = results.New(ctx, r.js, r.names, r.worker)
		if err == nil {
			store.SetEvents(!r.quiet)
		}
		return err
	})
	if err != nil {
		return b, fmt.Errorf("starting dlq router: %w", err)
	}
	wf, err := workflow.Open(ctx, r.js, r.names, r.logger)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		wf, err = nil, nil // provisioned before workflows: no step tasks to advance
	}
	if err != nil {
		return b, fmt.Errorf("starting dlq router: %w", err)
	}
	var turns *limits.Turns
	err = retry.Do(ctx, "binding the leases bucket for ordered keys", func(ctx context.Context) (err error) {
		turns, err = limits.NewTurns(ctx, r.js, r.names)
		if errors.Is(err, jetstream.ErrBucketNotFound) {
			turns, err = nil, nil // provisioned before flow control: no ordered keys
		}
		return err
	})
	if err != nil {
		return b, fmt.Errorf("starting dlq router: %w", err)
	}
	return routerBinding{tasks: tasks, parts: map[string]jetstream.Stream{}, cons: cons, results: store, wf: wf, turns: turns}, nil
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

// loop pulls advisories until softCtx ends. Each advisory is handled under
// hardCtx, so a graceful stop finishes it.
func (r *Router) loop(softCtx, hardCtx context.Context, b routerBinding) error {
	defer func() {
		st := r.Stats()
		r.logger.InfoContext(hardCtx, "dlq router stopped", "routed", st.Routed, "gone", st.Gone, "bad", st.Bad, "failed", st.Failed)
	}()
	failures := 0
	for softCtx.Err() == nil {
		err := r.pull(softCtx, hardCtx, b)
		switch {
		case err == nil:
			failures = 0
			continue
		case softCtx.Err() != nil:
			return nil
		case errors.Is(err, nats.ErrConnectionClosed) || errors.Is(err, jetstream.ErrConnectionClosed):
			r.logger.ErrorContext(hardCtx, "dlq router ends: connection closed", "error", err)
			return fmt.Errorf("dlq router: %w", err)
		}
		failures++
		delay := routerBackoff(r.retryDelay, failures)
		r.logger.WarnContext(hardCtx, "pulling advisories failed", "error", err, "retry_in", delay)
		t := time.NewTimer(delay)
		select {
		case <-softCtx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
	}
	return nil
}

// pull fetches one batch and handles it. A pull that simply expired is no
// error.
func (r *Router) pull(softCtx, hardCtx context.Context, b routerBinding) error {
	fctx, cancel := context.WithTimeout(softCtx, r.fetchWait)
	defer cancel()
	batch, err := b.cons.Fetch(r.batch, jetstream.FetchContext(fctx))
	if err != nil {
		return fmt.Errorf("fetching from consumer %q: %w", r.names.RouterConsumer(), err)
	}
	for msg := range batch.Messages() {
		if softCtx.Err() != nil {
			// Stopping: hand the rest of the batch back at once rather
			// than after the ack wait.
			_ = msg.Nak() // a lost nak only delays the advisory until the ack wait
			continue
		}
		r.handle(hardCtx, b, msg)
	}
	if err := batch.Error(); err != nil && !(errors.Is(err, context.DeadlineExceeded) && softCtx.Err() == nil) {
		return fmt.Errorf("fetching from consumer %q: %w", r.names.RouterConsumer(), err)
	}
	return nil
}

// routerAdvisory is the part of the server's
// io.nats.jetstream.advisory.v1.max_deliver event the router reads
// (JSConsumerDeliveryExceededAdvisory in nats-server).
type routerAdvisory struct {
	Type       string    `json:"type"`
	ID         string    `json:"id"`
	Time       time.Time `json:"timestamp"`
	Stream     string    `json:"stream"`
	Consumer   string    `json:"consumer"`
	StreamSeq  uint64    `json:"stream_seq"`
	Deliveries uint64    `json:"deliveries"`
}

const routerAdvisoryType = "io.nats.jetstream.advisory.v1.max_deliver"

func (r *Router) parseAdvisory(data []byte) (routerAdvisory, error) {
	var a routerAdvisory
	if err := json.Unmarshal(data, &a); err != nil {
		return a, fmt.Errorf("%w: %w", ErrBadAdvisory, err)
	}
	switch {
	case a.Type != "" && a.Type != routerAdvisoryType:
		return a, fmt.Errorf("%w: type %q, want %q", ErrBadAdvisory, a.Type, routerAdvisoryType)
	case a.StreamSeq == 0:
		return a, fmt.Errorf("%w: no stream_seq", ErrBadAdvisory)
	case a.Stream != "" && !r.isTaskStream(a.Stream):
		return a, fmt.Errorf("%w: stream %q is not the task stream %q or one of its partitions", ErrBadAdvisory, a.Stream, r.names.TaskStream())
	}
	return a, nil
}

// routerOutcome is what happened to the task an advisory named.
type routerOutcome int

const (
	routerRouted routerOutcome = iota
	routerGone
)

// handle acts on one advisory and settles it: ack when done or hopeless,
// nak with a delay on a transient error.
func (r *Router) handle(ctx context.Context, b routerBinding, msg jetstream.Msg) {
	ctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	log := r.logger
	adv, err := r.parseAdvisory(msg.Data())
	if err != nil {
		r.bad.Add(1)
		log.WarnContext(ctx, "dropping advisory", "error", err, "advisory_subject", msg.Subject(), "body", routerTruncate(msg.Data(), 256))
		r.ack(ctx, msg)
		return
	}
	log = log.With("stream_seq", adv.StreamSeq, "consumer", adv.Consumer, "deliveries", adv.Deliveries)
	// Every step of route is idempotent: a try that met an election is
	// run again whole, each try bounded, within the timeout; what still
	// fails is NAKed for a later retry.
	var outcome routerOutcome
	err = jsproto.Tries{PerTry: min(r.timeout, jsproto.DefaultPerTry)}.Do(ctx, "routing a dead task", func(ctx context.Context) (err error) {
		outcome, err = r.route(ctx, b, adv, log)
		return err
	})
	switch {
	case errors.Is(err, ErrBadAdvisory):
		r.bad.Add(1)
		log.WarnContext(ctx, "dropping advisory", "error", err)
	case err != nil:
		r.failed.Add(1)
		delay := r.retryDelay
		if md, merr := msg.Metadata(); merr == nil {
			delay = routerBackoff(r.retryDelay, int(md.NumDelivered))
		}
		log.WarnContext(ctx, "routing dead task failed, will retry", "error", err, "retry_in", delay)
		if nerr := msg.NakWithDelay(delay); nerr != nil {
			log.WarnContext(ctx, "nak of advisory failed; it is redelivered after the ack wait", "error", nerr)
		}
		return
	case outcome == routerGone:
		r.gone.Add(1)
		log.DebugContext(ctx, "task already gone from the task stream")
	default:
		r.routed.Add(1)
	}
	r.ack(ctx, msg)
}

func (r *Router) ack(ctx context.Context, msg jetstream.Msg) {
	// A lost ack only means the advisory comes back after the ack wait,
	// finds its task gone and is acked again.
	if err := msg.DoubleAck(ctx); err != nil {
		r.logger.WarnContext(ctx, "ack of advisory failed; it will be redelivered", "error", err)
	}
}

// isTaskStream reports whether name is SPOOL_TASKS or one of its
// partitions, SPOOL_TASKS_<k> (spool.Names.PartitionStream).
func (r *Router) isTaskStream(name string) bool {
	if name == r.names.TaskStream() {
		return true
	}
	k, ok := strings.CutPrefix(name, r.names.TaskStream()+"_")
	n, err := strconv.Atoi(k)
	return ok && err == nil && n > 0 && name == r.names.PartitionStream(n)
}

// partition returns the task stream (partition) an advisory names, bound
// at its first advisory.
func (r *Router) partition(ctx context.Context, b routerBinding, name string) (jetstream.Stream, error) {
	if name == "" || name == r.names.TaskStream() {
		return b.tasks, nil
	}
	if s, ok := b.parts[name]; ok {
		return s, nil
	}
	s, err := r.js.Stream(ctx, name)
	if err != nil {
		return nil, fmt.Errorf("binding task partition %s: %w", name, err)
	}
	b.parts[name] = s
	return s, nil
}

// route moves the task of adv to the dead-letter stream. Every step is
// idempotent.
func (r *Router) route(ctx context.Context, b routerBinding, adv routerAdvisory, log *slog.Logger) (routerOutcome, error) {
	tasks, err := r.partition(ctx, b, adv.Stream)
	if err != nil {
		return 0, err
	}
	raw, err := tasks.GetMsg(ctx, adv.StreamSeq)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return routerGone, nil
	}
	if err != nil {
		return 0, fmt.Errorf("reading task seq %d from %s: %w", adv.StreamSeq, tasks.CachedInfo().Config.Name, err)
	}
	if strings.HasPrefix(raw.Subject, r.names.Prefix()+".sched.") {
		return 0, fmt.Errorf("%w: seq %d is the pending schedule %q, which no Spool consumer delivers; left alone",
			ErrBadAdvisory, adv.StreamSeq, raw.Subject)
	}
	if _, _, err := r.names.ParseTaskSubject(raw.Subject); err != nil {
		log.WarnContext(ctx, "dead task is not on a task subject; dead-lettering it under type unknown",
			"subject", raw.Subject, "dlq_subject", dlq.SubjectFor(r.names, raw.Subject))
	}

	attempts := int(adv.Deliveries)
	m := dlq.MessageFromRaw(raw, spool.ReasonMaxDeliver, fmt.Sprintf(routerMaxDeliverError, attempts), attempts)
	if adv.Stream != r.names.TaskStream() {
		m.Stream = adv.Stream
	}
	// The advisory's time is the same for every router and every retry, so
	// the dead letter and the result document agree whoever writes them.
	m.FailedAt = adv.Time
	if m.FailedAt.IsZero() {
		m.FailedAt = time.Now()
	}
	// The dead letter loses Nats-Msg-Id; keep the task id in its own header.
	id := spool.TaskID(raw.Header, raw.Sequence)
	if raw.Header.Get(spool.HeaderTaskID) != id {
		h := make(nats.Header, len(raw.Header)+1)
		for k, v := range raw.Header {
			h[k] = v
		}
		h.Set(spool.HeaderTaskID, id)
		m.Header = h
	}
	log = log.With("task_id", id, "subject", raw.Subject)

	if err := dlq.Publish(ctx, r.js, r.names, m); err != nil {
		return 0, err
	}
	if err := b.results.Dead(ctx, m); err != nil {
		return 0, fmt.Errorf("recording dead task %s: %w", id, err)
	}
	// A workflow step is advanced as failed before its task goes, like a
	// worker does before it terminates one.
	if ref, ok := workflow.RefOf(raw.Header, id); ok && b.wf != nil {
		o := workflow.Outcome{State: workflow.Failed, Error: m.Err, Reason: spool.ReasonMaxDeliver}
		if err := b.wf.Finish(ctx, ref, o); err != nil {
			return 0, err
		}
	}
	if err := r.passTurn(ctx, b, raw, log); err != nil {
		return 0, err
	}
	if err := tasks.DeleteMsg(ctx, adv.StreamSeq); err != nil {
		// Deleting a message that is already gone fails too; that is fine.
		if _, gerr := tasks.GetMsg(ctx, adv.StreamSeq); !errors.Is(gerr, jetstream.ErrMsgNotFound) {
			return 0, fmt.Errorf("deleting dead task %s (seq %d) from %s: %w", id, adv.StreamSeq, tasks.CachedInfo().Config.Name, err)
		}
	}
	log.InfoContext(ctx, "task dead-lettered after exhausting its deliveries", "dlq_subject", dlq.SubjectFor(r.names, raw.Subject))
	return routerRouted, nil
}

// passTurn gives up the place in its key's turn that a dead task of an
// ordered or fair key holds (Spool-Order-Seq, limits.Turns.Leave) before
// the task goes, and asks the fleet to release the key's next task with a
// kick request: the worker that would have done it died on the task's last
// delivery. Without it the key would wait for good.
func (r *Router) passTurn(ctx context.Context, b routerBinding, raw *jetstream.RawStreamMsg, log *slog.Logger) error {
	seq, ok := limits.OrderSeq(raw.Header)
	key := raw.Header.Get(spool.HeaderKey)
	if !ok || key == "" || b.turns == nil {
		return nil
	}
	_, typ, err := r.names.ParseTaskSubject(raw.Subject)
	if err != nil {
		return nil // not a task subject: no key of a type to pass on
	}
	held, err := b.turns.Leave(ctx, typ, key, seq)
	if err != nil {
		return fmt.Errorf("passing the turn of key %q of %q on: %w", key, typ, err)
	}
	// Kicked also when the place was given up already: a router that
	// crashed after giving it up may not have kicked.
	if err := r.js.Conn().Publish(r.names.KickSubject(limits.EncodeKey(key), typ), nil); err != nil {
		log.WarnContext(ctx, "dead task's key not started again; the workers' sweep of held keys will", "key", key, "error", err)
	}
	if held {
		log.InfoContext(ctx, "dead task gave up its place in its key's turn", "key", key, "order_seq", seq)
	}
	return nil
}

// routerBackoff is base doubled for each failure after the first, capped at
// maxRouterRetryDelay.
func routerBackoff(base time.Duration, failures int) time.Duration {
	d := base
	for i := 1; i < failures && d < maxRouterRetryDelay; i++ {
		d *= 2
	}
	return min(d, maxRouterRetryDelay)
}

func routerTruncate(b []byte, n int) string {
	if len(b) <= n {
		return string(b)
	}
	return string(b[:n]) + "…"
}
