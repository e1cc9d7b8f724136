// Command spool-faultworker is spool-consumer for fault tests: the same
// worker and DLQ router (consumer.New, dlqrouter.New), configured by
// SPOOL_* variables, with handlers that append one line per execution to an
// execution log (SPOOL_FAULT_LOG) with a single O_APPEND write, so the log
// survives SIGKILL. The tests in tests/faults build it, run several, and
// kill, pause and restart them.
//
// Task types (SPOOL_FAULT_TYPES serves some of them only):
//
//   - fault.task: payload {"v":"<unique value>","sleep_ms":N,
//     "ignore_deadline":bool,"panic_attempts":N,"fail_attempts":N,
//     "hold":"<key>"}. Logs the execution, sleeps (honouring the attempt's
//     deadline unless ignore_deadline), panics on the first panic_attempts
//     attempts, fails on the first fail_attempts, then, with hold, waits
//     until the key exists in the KV bucket fault_holds or the attempt's
//     context ends, and returns the value as a JSON string. A payload that
//     is not this JSON is a permanent error.
//   - fault.echo: logs the execution with the payload as value and returns
//     the payload (any bytes, empty included).
//   - fault.step: a workflow step. Logs the execution with the task id as
//     value and returns the id as a JSON string; a step that takes inputs
//     fails for good if one of them is missing (null), which would mean
//     it ran before all its inputs completed.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/spoolq/spool/consumer"
	"github.com/spoolq/spool/consumer/dlqrouter"
	spool "github.com/spoolq/spool/shared"
	"github.com/spoolq/spool/shared/config"
	"github.com/spoolq/spool/shared/logging"
	"github.com/spoolq/spool/shared/natsconn"
	"github.com/spoolq/spool/shared/workflow"
	"github.com/spoolq/spool/tests/checker"
)

// Task types served.
const (
	TypeTask = "fault.task"
	TypeEcho = "fault.echo"
	TypeStep = "fault.step"
	// TypeLimited, TypePaced and TypeOrdered run as fault.task does and
	// also write their start and end to the span log, for the
	// flow-control checks.
	TypeLimited = "fault.limited"
	TypePaced   = "fault.paced"
	TypeOrdered = "fault.ordered"
)

// Config is the fault worker's configuration.
type Config struct {
	config.Common
	// ExecLog is the execution log file, appended to. SPOOL_FAULT_LOG,
	// required.
	ExecLog string `envconfig:"FAULT_LOG" required:"true" desc:"execution log file (appended)"`
	// SpanLog is the span log file of fault.limited, fault.paced and
	// fault.ordered runs, appended to. SPOOL_FAULT_SPAN_LOG, default: none.
	SpanLog string `envconfig:"FAULT_SPAN_LOG" desc:"span log file of fault.limited, fault.paced and fault.ordered runs (appended)"`
	// Concurrency is the number of worker slots (fixed). SPOOL_CONCURRENCY,
	// default 16.
	Concurrency int `envconfig:"CONCURRENCY" default:"16" desc:"worker slots"`
	// RetryBase is the first retry delay. SPOOL_RETRY_BASE, default 100ms.
	RetryBase time.Duration `envconfig:"RETRY_BASE" default:"100ms" desc:"first retry delay"`
	// ShutdownTimeout bounds a graceful stop. SPOOL_SHUTDOWN_TIMEOUT,
	// default 2s.
	ShutdownTimeout time.Duration `envconfig:"SHUTDOWN_TIMEOUT" default:"2s" desc:"time running handlers get on SIGTERM"`
	// ProcessingDelay: see consumer.WithProcessingDelay.
	// SPOOL_PROCESSING_DELAY, default 1s as in spool-consumer.
	ProcessingDelay time.Duration `envconfig:"PROCESSING_DELAY" default:"1s" desc:"write processing only for attempts running longer"`
	// DLQRouter also runs the DLQ router. SPOOL_DLQ_ROUTER, default true.
	DLQRouter bool `envconfig:"DLQ_ROUTER" default:"true" desc:"also run the DLQ router"`
	// Types are the task types served, each one of the types above.
	// SPOOL_FAULT_TYPES, comma-separated, default all of them. Where
	// workers pull by type the worker pulls only these.
	Types []string `envconfig:"FAULT_TYPES" desc:"task types served (comma-separated; default all)"`
}

// Validate checks the settings.
func (c *Config) Validate() error {
	if err := c.Common.Validate(); err != nil {
		return err
	}
	switch {
	case c.Concurrency < 1:
		return fmt.Errorf("SPOOL_CONCURRENCY: %d must be at least 1", c.Concurrency)
	case c.RetryBase <= 0:
		return fmt.Errorf("SPOOL_RETRY_BASE: %s must be positive", c.RetryBase)
	case c.ShutdownTimeout < 0:
		return fmt.Errorf("SPOOL_SHUTDOWN_TIMEOUT: %s is negative", c.ShutdownTimeout)
	case c.ProcessingDelay < 0:
		return fmt.Errorf("SPOOL_PROCESSING_DELAY: %s is negative", c.ProcessingDelay)
	}
	for _, typ := range c.Types {
		if !slices.Contains(allTypes, typ) {
			return fmt.Errorf("SPOOL_FAULT_TYPES: %q is not one of %v", typ, allTypes)
		}
	}
	return nil
}

// allTypes are the task types the fault worker can serve.
var allTypes = []string{TypeTask, TypeEcho, TypeStep, TypeLimited, TypePaced, TypeOrdered}

func main() {
	// First: the fault suite takes a worker ended by SIGTERM's default
	// action for one stopped before this line, which ran nothing.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stderr)
	stop()
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "spool-faultworker:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, stderr io.Writer) error {
	flags := flag.NewFlagSet("spool-faultworker", flag.ContinueOnError)
	flags.SetOutput(stderr)
	flags.Usage = func() {
		fmt.Fprintf(stderr, "usage: spool-faultworker\n\nEnvironment:\n%s", config.Usage(&Config{}))
	}
	if err := flags.Parse(args); err != nil {
		return err
	}
	var cfg Config
	if err := config.Load(&cfg); err != nil {
		return err
	}
	logger, err := logging.New(stderr, cfg.LogFormat, cfg.LogLevel)
	if err != nil {
		return err
	}
	log, err := openLog(cfg.ExecLog)
	if err != nil {
		return err
	}
	defer log.close()
	if cfg.SpanLog != "" {
		spans, err := openLog(cfg.SpanLog)
		if err != nil {
			return err
		}
		defer spans.close()
		log.spans = spans
	}

	connectCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	nc, err := natsconn.Connect(connectCtx, cfg.NATS, "spool-faultworker", logger)
	cancel()
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	log.holds = &holds{js: js}

	pid := strconv.Itoa(os.Getpid())
	handlers := map[string]consumer.HandlerFunc{
		TypeTask: log.task, TypeEcho: log.echo, TypeStep: log.step,
		TypeLimited: log.spanned, TypePaced: log.spanned, TypeOrdered: log.spanned,
	}
	served := cfg.Types
	if len(served) == 0 {
		served = allTypes
	}
	mux := consumer.NewMux()
	for _, typ := range served {
		mux.HandleFunc(typ, handlers[typ])
	}
	w, err := consumer.New(nc, mux,
		consumer.WithNames(cfg.Names()),
		consumer.WithLogger(logger),
		consumer.WithWorkerName(pid),
		consumer.WithConcurrency(cfg.Concurrency, cfg.Concurrency),
		consumer.WithRetry(cfg.RetryBase, 10*cfg.RetryBase, 3),
		consumer.WithShutdownTimeout(cfg.ShutdownTimeout),
		consumer.WithPolling(250*time.Millisecond, 250*time.Millisecond),
		consumer.WithProcessingDelay(cfg.ProcessingDelay),
	)
	if err != nil {
		return err
	}
	startCtx, cancel := context.WithTimeout(ctx, cfg.Startup())
	err = w.Start(startCtx)
	cancel()
	if err != nil && ctx.Err() != nil {
		return nil // SIGINT or SIGTERM while waiting for the cluster
	}
	if err != nil {
		return err
	}
	var router *dlqrouter.Router
	if cfg.DLQRouter {
		router, err = dlqrouter.New(nc,
			dlqrouter.WithNames(cfg.Names()),
			dlqrouter.WithLogger(logger),
			dlqrouter.WithWorker(pid+"/dlq-router"),
			dlqrouter.WithFetchWait(500*time.Millisecond),
		)
		if err == nil {
			startCtx, cancel := context.WithTimeout(ctx, cfg.Startup())
			err = router.Start(startCtx)
			cancel()
		}
		if err != nil {
			stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cfg.ShutdownTimeout)
			defer cancel()
			if ctx.Err() != nil {
				err = nil // SIGINT or SIGTERM while waiting for the cluster
			}
			return errors.Join(err, w.Stop(stopCtx))
		}
	}
	logger.Info("spool-faultworker running", "pid", pid, "types", mux.Types())
	<-ctx.Done()

	stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cfg.ShutdownTimeout+10*time.Second)
	defer cancel()
	if router != nil {
		if err := router.Stop(stopCtx); err != nil {
			logger.Warn("stopping the dlq router", "error", err)
		}
	}
	if err := w.Stop(stopCtx); err != nil {
		return fmt.Errorf("stopping worker: %w", err)
	}
	logger.Info("final stats: " + w.Stats().Summary())
	return nil
}

// execLog appends execution lines to a file.
type execLog struct {
	mu    sync.Mutex // one line per Write; the lock keeps lines whole in the file's order
	f     *os.File
	pid   string
	spans *execLog // the span log, or nil
	holds *holds   // where runs with a hold wait
}

func openLog(path string) (*execLog, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("opening the execution log: %w", err)
	}
	return &execLog{f: f, pid: strconv.Itoa(os.Getpid())}, nil
}

func (l *execLog) close() {
	if err := l.f.Close(); err != nil {
		fmt.Fprintln(os.Stderr, "spool-faultworker: closing the execution log:", err)
	}
}

// record appends one execution line. A failed write fails the attempt: an
// execution that cannot be recorded must not complete.
func (l *execLog) record(t *consumer.Task, value string) error {
	line := checker.FormatExecution(t.ID, checker.Execution{Value: value, Worker: l.pid, Attempt: t.Attempt})
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, err := l.f.Write(line); err != nil {
		return fmt.Errorf("writing the execution log: %w", err)
	}
	return nil
}

// taskPayload is the payload of fault.task.
type taskPayload struct {
	V              string `json:"v"`
	SleepMS        int    `json:"sleep_ms"`
	IgnoreDeadline bool   `json:"ignore_deadline"`
	PanicAttempts  int    `json:"panic_attempts"`
	FailAttempts   int    `json:"fail_attempts"`
	Hold           string `json:"hold"`
}

func (l *execLog) task(ctx context.Context, t *consumer.Task) ([]byte, error) {
	var p taskPayload
	if err := json.Unmarshal(t.Payload, &p); err != nil {
		if lerr := l.record(t, string(t.Payload)); lerr != nil {
			return nil, lerr
		}
		return nil, consumer.Permanent(fmt.Errorf("fault.task: payload is not the expected JSON: %w", err))
	}
	if err := l.record(t, p.V); err != nil {
		return nil, err
	}
	if p.SleepMS > 0 {
		timer := time.NewTimer(time.Duration(p.SleepMS) * time.Millisecond)
		if p.IgnoreDeadline {
			<-timer.C
		} else {
			select {
			case <-timer.C:
			case <-ctx.Done():
				timer.Stop()
				return nil, ctx.Err()
			}
		}
	}
	if t.Attempt <= p.PanicAttempts {
		panic(fmt.Sprintf("fault.task %s: panicking on attempt %d of the first %d", t.ID, t.Attempt, p.PanicAttempts))
	}
	if t.Attempt <= p.FailAttempts {
		return nil, fmt.Errorf("fault.task %s: failing attempt %d of the first %d", t.ID, t.Attempt, p.FailAttempts)
	}
	if p.Hold != "" {
		if err := l.holds.wait(ctx, p.Hold); err != nil {
			return nil, err
		}
	}
	return json.Marshal(p.V)
}

// write appends one line.
func (l *execLog) write(line []byte) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	_, err := l.f.Write(line)
	return err
}

// spanned runs fault.task's logic between a start and an end line in the
// span log. The start is written before the run is recorded, the end after
// the handler's work: the span lies within the run's flow-control leases.
func (l *execLog) spanned(ctx context.Context, t *consumer.Task) ([]byte, error) {
	if l.spans == nil {
		return nil, consumer.Permanent(errors.New(t.Type + ": no span log (set SPOOL_FAULT_SPAN_LOG)"))
	}
	key := t.Headers.Get(spool.HeaderKey)
	if err := l.spans.write(checker.FormatSpanStart(t.ID, t.Attempt, l.pid, t.Type, key, time.Now())); err != nil {
		return nil, fmt.Errorf("writing the span log: %w", err)
	}
	defer func() {
		if werr := l.spans.write(checker.FormatSpanEnd(t.ID, t.Attempt, l.pid, time.Now())); werr != nil {
			fmt.Fprintln(os.Stderr, "spool-faultworker: writing the span log:", werr)
		}
	}()
	return l.task(ctx, t)
}

func (l *execLog) echo(ctx context.Context, t *consumer.Task) ([]byte, error) {
	if err := l.record(t, string(t.Payload)); err != nil {
		return nil, err
	}
	return t.Payload, nil
}

func (l *execLog) step(ctx context.Context, t *consumer.Task) ([]byte, error) {
	if err := l.record(t, t.ID); err != nil {
		return nil, err
	}
	if json.Valid(t.Payload) && len(t.Payload) > 0 && t.Payload[0] == '{' {
		in, err := workflow.DecodeInput(t.Payload)
		if err != nil {
			return nil, consumer.Permanent(err)
		}
		for i, v := range in.Inputs {
			if string(v) == "null" {
				return nil, consumer.Permanent(fmt.Errorf("fault.step %s: input %d is missing", t.ID, i))
			}
		}
	}
	return json.Marshal(t.ID)
}
