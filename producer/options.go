package producer

import (
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"time"

	spool "github.com/spoolq/spool/shared"
	"github.com/spoolq/spool/shared/logging"
)

// Defaults of the client options.
const (
	// DefaultTimeout bounds each call (and each batch step) whose context
	// has no deadline, and each asynchronous publish ack.
	DefaultTimeout = 5 * time.Second
	// DefaultPublishWindow is how many asynchronous publishes a client keeps
	// in flight during EnqueueBatch.
	DefaultPublishWindow = 4096
)

// Option configures a Client. Options validate their argument and New
// fails with the first invalid one.
type Option func(*options) error

type options struct {
	names   spool.Names
	logger  *slog.Logger
	timeout time.Duration
	window  int
	// quiet: no enqueued events (WithEnqueuedEvents(false)).
	quiet bool
	// unchecked: no check of task types (WithUnservedWarnings(false)).
	unchecked bool
}

func defaultOptions() options {
	return options{
		names:   spool.DefaultNames(),
		logger:  logging.OrDefault(nil),
		timeout: DefaultTimeout,
		window:  DefaultPublishWindow,
	}
}

// WithPrefix derives every subject, stream and bucket name from prefix.
// Default spool.DefaultPrefix ("spool").
func WithPrefix(prefix string) Option {
	return func(o *options) error {
		n, err := spool.NewNames(prefix)
		if err != nil {
			return err
		}
		o.names = n
		return nil
	}
}

// WithNames uses names built elsewhere (config.Common.Names()). Default
// spool.DefaultNames().
func WithNames(names spool.Names) Option {
	return func(o *options) error {
		if names.Prefix() == "" {
			return errors.New("names: zero spool.Names, build one with spool.NewNames")
		}
		o.names = names
		return nil
	}
}

// WithLogger sets the logger. Default (and nil): warnings and errors on
// standard error (logging.OrDefault).
func WithLogger(l *slog.Logger) Option {
	return func(o *options) error {
		o.logger = logging.OrDefault(l)
		return nil
	}
}

// WithTimeout sets the timeout applied to a call whose context has no
// deadline, and to each asynchronous publish ack. Default DefaultTimeout (5s).
func WithTimeout(d time.Duration) Option {
	return func(o *options) error {
		if d <= 0 {
			return fmt.Errorf("timeout: %s must be positive", d)
		}
		o.timeout = d
		return nil
	}
}

// WithPublishWindow caps the asynchronous publishes in flight during
// EnqueueBatch, across all batches of the client. Default
// DefaultPublishWindow (4096).
func WithPublishWindow(n int) Option {
	return func(o *options) error {
		if n < 1 || n > 1<<20 {
			return fmt.Errorf("publish window: %d must be 1 to %d", n, 1<<20)
		}
		o.window = n
		return nil
	}
}

// WithEnqueuedEvents sets whether the client announces each task it
// stored with an enqueued event (a core publish on
// <prefix>.events.enqueued.<priority>.<id>.<type>; see Subscribe). Default
// true. Turn it off in a producer whose enqueued events nobody watches:
// the event costs about as much as the task's own publish to the client
// (its encoding) and to the server (parsing it and matching a subject
// that is new every time), whether or not anyone listens, and a client
// cannot tell whether anyone does. Every other event is the worker's.
func WithEnqueuedEvents(on bool) Option {
	return func(o *options) error {
		o.quiet = !on
		return nil
	}
}

// WithUnservedWarnings sets whether the client checks each task's type
// against the types the workers serve and warns, in
// EnqueueResult.Warning, of a type no worker serves. Default true. The
// check reads the deployment (admin.Client.Serving) at most every
// ServedCheckEvery in the background and never fails or holds back an
// enqueue; turn it off where the client may not read it: it lists the
// consumers of the task streams ($JS.API.CONSUMER.NAMES) where workers
// pull by type, and pings the consumer processes ($SRV.PING.spool-consumer)
// where they pull by priority.
func WithUnservedWarnings(on bool) Option {
	return func(o *options) error {
		o.unchecked = !on
		return nil
	}
}

// EnqueueOption adjusts one call's copy of a task; it overrides the task's
// field of the same name.
type EnqueueOption func(*Task)

// TaskID sets the task id (default: a new time-ordered id from spool.NewID).
func TaskID(id string) EnqueueOption { return func(t *Task) { t.ID = id } }

// AtPriority sets the priority.
func AtPriority(p spool.Priority) EnqueueOption { return func(t *Task) { t.Priority = &p } }

// MaxRetries sets the retries after the first attempt (0 means none).
func MaxRetries(n int) EnqueueOption { return func(t *Task) { t.MaxRetries = &n } }

// Timeout sets the per-attempt handler deadline.
func Timeout(d time.Duration) EnqueueOption { return func(t *Task) { t.Timeout = d } }

// Unique makes the task unique under key for ttl: while the key lives,
// enqueueing another task with it fails with a *UniqueConflictError.
func Unique(key string, ttl time.Duration) EnqueueOption {
	return func(t *Task) { t.UniqueKey, t.UniqueTTL = key, ttl }
}

// Key sets the flow-control key (Spool-Key) that per-key limits count the
// task under, such as a customer id.
func Key(key string) EnqueueOption { return func(t *Task) { t.Key = key } }

// DiscardResult keeps no result document of the task when it completes
// (Spool-Result: discard): Result and Wait answer ErrResultDiscarded. Its
// events, counters, failures and dead letter are kept.
func DiscardResult() EnqueueOption { return func(t *Task) { t.ResultPolicy = spool.DiscardResult } }

// KeepResult keeps the task's result document even where the worker
// discards the results of its type (Spool-Result: keep).
func KeepResult() EnqueueOption { return func(t *Task) { t.ResultPolicy = spool.KeepResult } }

// ProcessAt delays the task until at; a time not in the future runs now.
func ProcessAt(at time.Time) EnqueueOption {
	return func(t *Task) { t.ProcessAt, t.Delay = at, 0 }
}

// ProcessIn delays the task by d.
func ProcessIn(d time.Duration) EnqueueOption {
	return func(t *Task) { t.Delay, t.ProcessAt = d, time.Time{} }
}

// Header adds an extra header carried with the task.
func Header(key, value string) EnqueueOption {
	return func(t *Task) {
		h := make(map[string]string, len(t.Headers)+1)
		maps.Copy(h, t.Headers)
		h[key] = value
		t.Headers = h
	}
}

// Trace sets the W3C trace context (traceparent, tracestate).
func Trace(traceparent, tracestate string) EnqueueOption {
	return func(t *Task) { t.TraceParent, t.TraceState = traceparent, tracestate }
}
