package consumer

import (
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"time"

	spool "github.com/spoolq/spool/shared"
	"github.com/spoolq/spool/shared/logging"
	"github.com/spoolq/spool/streams"
)

// BoostStep multiplies a priority's weight once its oldest waiting task is
// at least After old. The largest step that applies wins; the last step is
// the cap.
type BoostStep struct {
	After  time.Duration
	Factor float64
}

// Weights are the scheduling weights of the five priorities, indexed by
// spool.Priority.
type Weights [len(spool.Priorities)]float64

// DefaultWeights returns critical 1.0, high 0.7, normal 0.4, low 0.2,
// idle 0.1.
func DefaultWeights() Weights { return Weights{1.0, 0.7, 0.4, 0.2, 0.1} }

// defaultBoost is ×1.5 from 30s, ×1.75 from 60s, ×2.0 from 90s (the cap).
func defaultBoost() []BoostStep {
	return []BoostStep{{30 * time.Second, 1.5}, {60 * time.Second, 1.75}, {90 * time.Second, 2.0}}
}

// config holds a Worker's settings. New starts from defaultConfig and
// applies the With… options, which validate their arguments; every default
// is documented on its option.
type config struct {
	// retryDelayFunc: WithRetryDelayFunc; nil for the backoff.
	retryDelayFunc RetryDelayFunc

	Names      spool.Names
	Logger     *slog.Logger
	WorkerName string
	// Partition is the task partition pulled, allPartitions for every
	// one: WithPartition.
	Partition int
	// MinConcurrency and MaxConcurrency bound the number of worker slots
	// (handlers running at once). The pool starts at MinConcurrency and
	// autoscales between them.
	MinConcurrency int
	MaxConcurrency int
	Weights        Weights
	// Boost multiplies a priority's weight by the age of its oldest waiting
	// task. Empty disables the boost.
	Boost  []BoostStep
	Strict bool
	// RetryBase and RetryMax shape the backoff between attempts:
	// min(RetryBase·2^(attempt-1), RetryMax).
	RetryBase time.Duration
	RetryMax  time.Duration
	// RetryJitter adds a random delay of up to this fraction of the backoff.
	RetryJitter float64
	// MaxRetries is the number of retries after the first attempt for tasks
	// without a Spool-Max-Retries header.
	MaxRetries int
	// TaskTimeout is the per-attempt deadline for tasks without a
	// Spool-Timeout header.
	TaskTimeout     time.Duration
	ShutdownTimeout time.Duration
	PollWait        time.Duration
	RefreshInterval time.Duration
	ScaleUpFill     float64
	ScaleDownIdle   time.Duration
	IOTimeout       time.Duration
	ProcessingDelay time.Duration
	// Events: the worker publishes task events (WithEvents).
	Events bool
	// Types are the task-type patterns the worker serves (WithTypes); nil
	// takes them from the handler's Types method.
	Types []string
	// DiscardResults are the task-type patterns whose completed results
	// are not stored (WithDiscardResults).
	DiscardResults []string

	// now is the clock used for task ages (the boost); tests shift it.
	now func() time.Time
}

// defaultConfig returns the defaults documented on the With… options.
func defaultConfig() config {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "worker"
	}
	return config{
		Names:           spool.DefaultNames(),
		Logger:          logging.OrDefault(nil),
		WorkerName:      host + "-" + strconv.Itoa(os.Getpid()),
		Partition:       allPartitions,
		MinConcurrency:  1,
		MaxConcurrency:  10,
		Weights:         DefaultWeights(),
		Boost:           defaultBoost(),
		RetryBase:       time.Second,
		RetryMax:        5 * time.Minute,
		RetryJitter:     0.2,
		MaxRetries:      spool.DefaultMaxRetries,
		TaskTimeout:     30 * time.Minute,
		ShutdownTimeout: 30 * time.Second,
		PollWait:        time.Second,
		RefreshInterval: time.Second,
		ScaleUpFill:     0.6,
		ScaleDownIdle:   2 * time.Minute,
		IOTimeout:       10 * time.Second,
		ProcessingDelay: time.Second,
		Events:          true,
		now:             time.Now,
	}
}

// validate checks the settings as a whole.
func (o config) validate() error {
	if o.Names.Prefix() == "" {
		return fmt.Errorf("%w: Names not set (use spool.NewNames)", ErrInvalidOption)
	}
	if o.MinConcurrency < 1 || o.MaxConcurrency < o.MinConcurrency {
		return fmt.Errorf("%w: concurrency min %d max %d: need 1 <= min <= max", ErrInvalidOption, o.MinConcurrency, o.MaxConcurrency)
	}
	if err := validateWeights(o.Weights); err != nil {
		return err
	}
	if err := validateBoost(o.Boost); err != nil {
		return err
	}
	switch {
	case o.RetryBase <= 0 || o.RetryMax < o.RetryBase:
		return fmt.Errorf("%w: retry base %s max %s: need 0 < base <= max", ErrInvalidOption, o.RetryBase, o.RetryMax)
	case o.RetryJitter < 0 || o.RetryJitter > 1:
		return fmt.Errorf("%w: retry jitter %g must be 0 to 1", ErrInvalidOption, o.RetryJitter)
	case o.MaxRetries < 0 || o.MaxRetries > spool.MaxMaxRetries:
		return fmt.Errorf("%w: max retries %d must be 0 to %d", ErrInvalidOption, o.MaxRetries, spool.MaxMaxRetries)
	case o.TaskTimeout <= 0 || o.TaskTimeout > spool.MaxTimeout:
		return fmt.Errorf("%w: task timeout %s must be positive and at most %s", ErrInvalidOption, o.TaskTimeout, spool.MaxTimeout)
	case o.ShutdownTimeout < 0:
		return fmt.Errorf("%w: shutdown timeout %s is negative", ErrInvalidOption, o.ShutdownTimeout)
	case o.PollWait < 10*time.Millisecond:
		return fmt.Errorf("%w: poll wait %s must be at least 10ms", ErrInvalidOption, o.PollWait)
	case o.RefreshInterval < time.Millisecond:
		return fmt.Errorf("%w: refresh interval %s must be at least 1ms", ErrInvalidOption, o.RefreshInterval)
	case o.ScaleUpFill <= 0 || o.ScaleUpFill > 1:
		return fmt.Errorf("%w: scale-up fill %g must be in (0, 1]", ErrInvalidOption, o.ScaleUpFill)
	case o.ScaleDownIdle <= 0:
		return fmt.Errorf("%w: scale-down idle period %s must be positive", ErrInvalidOption, o.ScaleDownIdle)
	case o.IOTimeout <= 0:
		return fmt.Errorf("%w: I/O timeout %s must be positive", ErrInvalidOption, o.IOTimeout)
	case o.ProcessingDelay < 0:
		return fmt.Errorf("%w: processing delay %s is negative", ErrInvalidOption, o.ProcessingDelay)
	}
	return nil
}

func validateWeights(w Weights) error {
	for i, v := range w {
		if !(v > 0) || v > 1e6 {
			return fmt.Errorf("%w: weight of %s is %g, must be positive and at most 1e6", ErrInvalidOption, spool.Priority(i), v)
		}
	}
	return nil
}

func validateBoost(steps []BoostStep) error {
	for i, s := range steps {
		if s.After <= 0 {
			return fmt.Errorf("%w: boost step %d: age %s must be positive", ErrInvalidOption, i, s.After)
		}
		if !(s.Factor >= 1) || s.Factor > 1e6 {
			return fmt.Errorf("%w: boost step %d: factor %g must be 1 to 1e6", ErrInvalidOption, i, s.Factor)
		}
		if i > 0 && s.After <= steps[i-1].After {
			return fmt.Errorf("%w: boost steps must have increasing ages (%s after %s)", ErrInvalidOption, s.After, steps[i-1].After)
		}
	}
	return nil
}

// Option changes one setting of a Worker, validating it; New fails with an
// error wrapping ErrInvalidOption when one does not hold.
type Option func(*config) error

// WithPartition pins the worker to task partition k (see
// streams.Settings.Partitions and docs/scaling.md): the stream
// spool.Names.PartitionStream(k) and its five priority consumers only. A
// negative k pulls every partition, the default: Start reads how many the
// topology has (recorded on SPOOL_TASKS) and pulls the five priority
// consumers of each, one scheduler over all of them, so the worker's
// slots, weights and boost apply across the partitions. A worker pulls
// the partitions that exist when it starts: restart workers after adding
// partitions.
func WithPartition(k int) Option {
	return func(o *config) error {
		if k < 0 {
			o.Partition = allPartitions
			return nil
		}
		if k >= streams.MaxPartitions {
			return fmt.Errorf("%w: partition %d must be 0 to %d (or negative: all)", ErrInvalidOption, k, streams.MaxPartitions-1)
		}
		o.Partition = k
		return nil
	}
}

// WithNames sets the names (prefix) of the streams, consumers and buckets.
// Default: spool.DefaultNames().
func WithNames(n spool.Names) Option {
	return func(o *config) error {
		if n.Prefix() == "" {
			return fmt.Errorf("%w: zero Names (use spool.NewNames)", ErrInvalidOption)
		}
		o.Names = n
		return nil
	}
}

// WithLogger sets the logger of the worker's logs. Default (and nil):
// warnings and errors on standard error (logging.OrDefault).
func WithLogger(l *slog.Logger) Option {
	return func(o *config) error {
		o.Logger = logging.OrDefault(l)
		return nil
	}
}

// WithWorkerName names this worker in results and stats. Default:
// <hostname>-<pid>.
func WithWorkerName(name string) Option {
	return func(o *config) error {
		if name == "" {
			return fmt.Errorf("%w: empty worker name", ErrInvalidOption)
		}
		o.WorkerName = name
		return nil
	}
}

// WithConcurrency bounds the slot pool (handlers running at once): 1 <=
// min <= max. The pool starts at min and autoscales between them; min ==
// max turns autoscaling off. Default: 1 and 10.
func WithConcurrency(minSlots, maxSlots int) Option {
	return func(o *config) error {
		if minSlots < 1 || maxSlots < minSlots {
			return fmt.Errorf("%w: concurrency min %d max %d: need 1 <= min <= max", ErrInvalidOption, minSlots, maxSlots)
		}
		o.MinConcurrency, o.MaxConcurrency = minSlots, maxSlots
		return nil
	}
}

// WithWeights sets the weights that pick the priority to pull from; every
// weight must be positive. Default: DefaultWeights().
func WithWeights(w Weights) Option {
	return func(o *config) error {
		if err := validateWeights(w); err != nil {
			return err
		}
		o.Weights = w
		return nil
	}
}

// WithBoost sets the anti-starvation boost steps (increasing ages, factors
// of at least 1), which multiply a priority's weight by the age of its
// oldest waiting task. No steps turn the boost off. Default: ×1.5 from 30s,
// ×1.75 from 60s, ×2.0 from 90s (the cap).
func WithBoost(steps ...BoostStep) Option {
	return func(o *config) error {
		if err := validateBoost(steps); err != nil {
			return err
		}
		o.Boost = slices.Clone(steps)
		return nil
	}
}

// WithStrict turns strict priority order on or off: always serve the
// highest non-empty priority, ignoring weights and boost. Default: off.
func WithStrict(strict bool) Option {
	return func(o *config) error {
		o.Strict = strict
		return nil
	}
}

// WithTaskTimeout sets the per-attempt deadline of tasks without a
// Spool-Timeout header. Default: 30m.
func WithTaskTimeout(d time.Duration) Option {
	return func(o *config) error {
		if d <= 0 || d > spool.MaxTimeout {
			return fmt.Errorf("%w: task timeout %s must be positive and at most %s", ErrInvalidOption, d, spool.MaxTimeout)
		}
		o.TaskTimeout = d
		return nil
	}
}

// WithShutdownTimeout sets how long Stop lets running handlers finish
// before cancelling them and handing their tasks back. Default: 30s.
func WithShutdownTimeout(d time.Duration) Option {
	return func(o *config) error {
		if d < 0 {
			return fmt.Errorf("%w: shutdown timeout %s is negative", ErrInvalidOption, d)
		}
		o.ShutdownTimeout = d
		return nil
	}
}

// WithPolling sets how long one long-poll pull waits on an empty priority
// before it is renewed (it also bounds how long Stop waits for outstanding
// pulls), at least 10ms, and how often the backlog and the oldest waiting
// task of priorities without a long-poll are read and autoscaling is
// reconsidered, at least 1ms. Default: 1s and 1s.
func WithPolling(pollWait, refresh time.Duration) Option {
	return func(o *config) error {
		if pollWait < 10*time.Millisecond {
			return fmt.Errorf("%w: poll wait %s must be at least 10ms", ErrInvalidOption, pollWait)
		}
		if refresh < time.Millisecond {
			return fmt.Errorf("%w: refresh interval %s must be at least 1ms", ErrInvalidOption, refresh)
		}
		o.PollWait, o.RefreshInterval = pollWait, refresh
		return nil
	}
}

// WithAutoscale sets the busy fraction of the slots at or above which the
// pool grows by one slot while a backlog waits, in (0, 1], and how long
// slots must go unused before the pool shrinks to the most slots used in
// that period (not below the minimum). Default: 0.6 and 2m.
func WithAutoscale(upFill float64, downIdle time.Duration) Option {
	return func(o *config) error {
		if upFill <= 0 || upFill > 1 {
			return fmt.Errorf("%w: scale-up fill %g must be in (0, 1]", ErrInvalidOption, upFill)
		}
		if downIdle <= 0 {
			return fmt.Errorf("%w: scale-down idle period %s must be positive", ErrInvalidOption, downIdle)
		}
		o.ScaleUpFill, o.ScaleDownIdle = upFill, downIdle
		return nil
	}
}

// WithProcessingDelay defers the "processing" result write until the
// attempt has run for d: a shorter attempt goes straight to its next state
// (completed, retrying, dead; its document still records when it started)
// and saves one JetStream write, a third of the server's work per task with
// fast handlers. 0 writes "processing" as every attempt starts. Default: 1s.
func WithProcessingDelay(d time.Duration) Option {
	return func(o *config) error {
		if d < 0 {
			return fmt.Errorf("%w: processing delay %s is negative", ErrInvalidOption, d)
		}
		o.ProcessingDelay = d
		return nil
	}
}

// WithEvents sets whether the worker publishes task events (started,
// progress, retrying, snoozed, completed, dead, cancelled: core publishes
// on <prefix>.events.<kind>.<priority>.<id>.<type>, see docs/contract.md).
// Default true. Turn it off in a fleet whose events nobody watches, as
// Celery workers run without -E: each event costs the worker its encoding
// and the server the parsing and matching of a subject that is new every
// time, whether or not anyone listens (7–19% of the CPU per task of a
// no-op handler; BENCHMARKS.md). Result documents are written as
// always, so Client.Result and Client.Wait still work, and every task
// still completes, retries or is dead-lettered; but Client.Watch and
// Client.Subscribe see nothing of the tasks this worker runs.
func WithEvents(on bool) Option {
	return func(o *config) error {
		o.Events = on
		return nil
	}
}

// WithIOTimeout bounds each result, dead-letter and ack write of the
// worker. Default: 10s.
func WithIOTimeout(d time.Duration) Option {
	return func(o *config) error {
		if d <= 0 {
			return fmt.Errorf("%w: I/O timeout %s must be positive", ErrInvalidOption, d)
		}
		o.IOTimeout = d
		return nil
	}
}

// Name returns the worker's name, as it appears in result documents and
// stats (WithWorkerName).
func (w *Worker) Name() string { return w.o.WorkerName }

// Names returns the names (prefix) of the topology the worker serves
// (WithNames).
func (w *Worker) Names() spool.Names { return w.o.Names }
