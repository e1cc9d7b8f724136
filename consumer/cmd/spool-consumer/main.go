// Command spool-consumer runs a Spool worker: it pulls tasks from the
// per-priority consumers by weight, runs the registered handlers and writes
// results, until SIGINT or SIGTERM stop it gracefully.
//
// It is configured by SPOOL_* environment variables (run with -h for the
// list). With --demo it registers the demo handlers demo.echo, demo.sleep,
// demo.fail and demo.progress.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"

	"github.com/spoolq/spool/consumer"
	"github.com/spoolq/spool/consumer/demo"
	"github.com/spoolq/spool/consumer/dlqrouter"
	"github.com/spoolq/spool/consumer/metrics"
	"github.com/spoolq/spool/consumer/remote"
	"github.com/spoolq/spool/consumer/service"
	"github.com/spoolq/spool/consumer/tracing"
	"github.com/spoolq/spool/shared/cli"
	"github.com/spoolq/spool/shared/config"
	"github.com/spoolq/spool/shared/fleet"
	"github.com/spoolq/spool/shared/logging"
	"github.com/spoolq/spool/shared/natsconn"
	"github.com/spoolq/spool/shared/telemetry"
	"github.com/spoolq/spool/streams/dlq"
)

func main() {
	// SIGINT and SIGTERM end ctx: run then stops the worker gracefully.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(cli.Exit(os.Stderr, "spool-consumer", err))
}

const usage = `usage: spool-consumer [--demo]

Runs a Spool worker until SIGINT or SIGTERM: it pulls tasks by priority weight, runs
the registered handlers, retries failures with backoff, dead-letters the rest and
writes every state to the results bucket. Without --demo no handler is registered and
every task is dead-lettered with reason no_handler: link your handlers into your own
binary with the consumer library, or serve them as remote handlers.

flags:
`

const demoUsage = `register the demo handlers: demo.echo returns its payload; demo.sleep sleeps {"ms":N}
                         (at most 1h) and returns {"slept_ms":N}; demo.fail fails the first
                         {"fail_times":N} attempts, then returns {"attempts":A}; demo.progress
                         runs {"steps":N,"ms":M} steps of M ms (default 5 of 1000), reports
                         progress after each (percent, {"step":I,"steps":N}), returns {"steps":N}`

// run loads the configuration from the environment, connects, and runs a
// worker until ctx ends, then stops it gracefully. -h prints the usage on
// stdout and returns flag.ErrHelp.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	flags := cli.NewFlagSet("spool-consumer")
	withDemo := flags.Bool("demo", false, demoUsage)
	if err := cli.Parse(flags, args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(stdout, usage)
			cli.PrintFlags(stdout, flags)
			fmt.Fprintf(stdout, "\nenvironment:\n%s\ntracing (OpenTelemetry, off unless an exporter or endpoint is set):\n  OTEL_TRACES_EXPORTER, OTEL_EXPORTER_OTLP_ENDPOINT, OTEL_EXPORTER_OTLP_PROTOCOL,\n  OTEL_SERVICE_NAME, OTEL_TRACES_SAMPLER, OTEL_SDK_DISABLED\n", config.Usage(&Config{}))
		}
		return err
	}
	if flags.NArg() > 0 {
		return fmt.Errorf("spool-consumer takes no arguments, got %q (spool-consumer --help)", flags.Args())
	}

	var cfg Config
	if err := config.Load(&cfg); err != nil {
		return err
	}
	logger, err := logging.New(stderr, cfg.LogFormat, cfg.LogLevel)
	if err != nil {
		return err
	}
	for _, w := range config.Warnings(os.Environ()) {
		logger.Warn(w)
	}
	otelCfg, err := telemetry.ConfigFromEnv(os.Getenv)
	if err != nil {
		return err
	}
	tp, stopTracing, err := telemetry.Setup(ctx, otelCfg, "spool-consumer", logger)
	if err != nil {
		return err
	}
	// Everything stopped after SIGTERM shares one deadline,
	// SPOOL_SHUTDOWN_TIMEOUT from the first stop, whatever the server's state.
	stopping := newShutdown(ctx, cfg.ShutdownTimeout)
	defer stopping.cancel()
	defer func() {
		sctx, cancel := stopping.within(5 * time.Second)
		defer cancel()
		if err := stopTracing(sctx); err != nil {
			logger.Warn("flushing traces", "error", err)
		}
	}()

	connectCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	nc, err := natsconn.Connect(connectCtx, cfg.NATS, "spool-consumer", logger)
	cancel()
	if err != nil {
		return err
	}
	defer nc.Close()

	mux := consumer.NewMux()
	traced := tracing.Middleware(tp)
	mux.Use(traced)
	if *withDemo {
		demo.Register(mux)
	}
	var handler consumer.Handler = mux
	var routes *remote.Routes
	if len(cfg.routes) > 0 {
		routes, err = remote.NewRoutes(nc, cfg.routes, logger)
		if err != nil {
			return err
		}
		handler = remote.Fallback(mux, routes, traced)
		for _, r := range cfg.routes {
			logger.Info("remote handler route", "type_pattern", r.Pattern, "subject", r.Subject,
				"concurrency", r.Concurrency, "timeout", r.Timeout)
		}
	}
	if len(mux.Types()) == 0 && routes == nil {
		logger.Warn("no handlers registered: every task will be dead-lettered with reason no_handler (run with --demo for the demo handlers, or set SPOOL_REMOTE_ROUTES)")
	}
	opts := append(cfg.Options(), consumer.WithLogger(logger))
	if served := handled(mux, routes); len(served) > 0 {
		// Where workers pull by type, the process pulls only these.
		opts = append(opts, consumer.WithTypes(served...))
	}
	w, err := consumer.New(nc, handler, opts...)
	if err != nil {
		return err
	}
	// Health answers from the start, so probes see a worker starting up.
	obs, err := startObserver(ctx, cfg.MetricsAddr, w, nc, logger)
	if err != nil {
		return err
	}
	defer func() {
		sctx, cancel := stopping.within(5 * time.Second)
		defer cancel()
		if err := obs.stop(sctx); err != nil {
			logger.Warn("stopping the metrics listener", "error", err)
		}
	}()
	// Start-up rides out an election: the worker's look-ups are retried
	// until the cluster answers or SPOOL_STARTUP_TIMEOUT passes.
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
		router, err = startRouter(ctx, nc, cfg, w.Name(), logger)
		if err != nil {
			if ctx.Err() != nil {
				err = nil // SIGINT or SIGTERM while waiting for the cluster
			}
			if serr := w.Stop(stopping.context()); serr != nil && !errors.Is(serr, context.DeadlineExceeded) {
				err = errors.Join(err, serr)
			}
			return err
		}
	}
	svc, err := observe(ctx, nc, w, router, routes, handled(mux, routes), obs, cfg)
	if err != nil {
		logger.Warn("the NATS service API is off", "error", err)
	}
	logger.Info("spool-consumer running", "types", mux.Types(), "nats_url", nc.ConnectedUrlRedacted(),
		"dlq_router", cfg.DLQRouter, "metrics_addr", obs.addr)

	summarize(ctx, w, logger, cfg.StatsInterval)

	logger.Info("stopping: finishing running tasks", "shutdown_timeout", cfg.ShutdownTimeout)
	if svc != nil {
		// Leave the fleet listing first.
		if err := svc.Stop(); err != nil {
			logger.Warn("stopping the NATS service", "error", err)
		}
	}
	// The worker cancels the handlers still running a little before the
	// deadline (Config.handlerTimeout), leaving the rest of it to hand
	// their tasks back; a server that does not answer by then is given up.
	stopCtx := stopping.context()
	if router != nil {
		if err := router.Stop(stopCtx); err != nil {
			logger.Warn("stopping the dlq router", "error", err)
		}
	}
	if err := w.Stop(stopCtx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("stopping worker: %w", err)
	}
	logger.Info("final stats: " + w.Stats().Summary())
	// Stop flushed every ack and result write; the deferred Close ends the
	// connection.
	return nil
}

// startRouter starts the DLQ router that moves tasks whose deliveries ran
// out to the dead-letter stream.
func startRouter(ctx context.Context, nc *nats.Conn, cfg Config, worker string, logger *slog.Logger) (*dlqrouter.Router, error) {
	r, err := dlqrouter.New(nc,
		dlqrouter.WithNames(cfg.Names()),
		dlqrouter.WithLogger(logger),
		dlqrouter.WithWorker(worker+"/dlq-router"),
		dlqrouter.WithEvents(cfg.Events),
		dlqrouter.WithUnservedDeadline(cfg.UnservedDeadline),
	)
	if err != nil {
		return nil, fmt.Errorf("creating the dlq router: %w", err)
	}
	// Start-up rides out an election: the router's look-ups are retried
	// until the cluster answers or SPOOL_STARTUP_TIMEOUT passes.
	startCtx, cancel := context.WithTimeout(ctx, cfg.Startup())
	defer cancel()
	if err := r.Start(startCtx); err != nil {
		return nil, fmt.Errorf("starting the dlq router: %w", err)
	}
	return r, nil
}

// observe registers the worker's metrics and its NATS micro service
// (spool-consumer), which advertises the metrics address.
func observe(ctx context.Context, nc *nats.Conn, w *consumer.Worker, router *dlqrouter.Router, routes *remote.Routes, handled []string, obs *observer, cfg Config) (micro.Service, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("opening JetStream: %w", err)
	}
	opts := []metrics.Option{metrics.WithDeadLetters(dlq.New(js, cfg.Names()).Size), metrics.WithLogger(obs.logger)}
	var svcOpts []service.Option
	if router != nil {
		opts = append(opts, metrics.WithRouter(router))
		svcOpts = append(svcOpts, service.WithRouter(router))
	}
	if routes != nil {
		svcOpts = append(svcOpts, service.WithRemote(routes))
	}
	// Scrapes go on while the worker drains after SIGTERM.
	if err := obs.reg.Register(metrics.New(context.WithoutCancel(ctx), w, opts...)); err != nil {
		return nil, fmt.Errorf("registering the worker metrics: %w", err)
	}
	if obs.addr != "" {
		svcOpts = append(svcOpts, service.WithMetadata(map[string]string{"metrics_addr": obs.addr}))
	}
	svcOpts = append(svcOpts, service.WithMetadata(map[string]string{fleet.MetadataHandlers: strings.Join(handled, ",")}))
	return service.Add(nc, w, svcOpts...)
}

// handled lists the task types the process serves: the mux's types, then
// the remote route patterns.
func handled(mux *consumer.Mux, routes *remote.Routes) []string {
	types := mux.Types()
	if routes != nil {
		for _, r := range routes.Routes() {
			types = append(types, r.Pattern)
		}
	}
	return types
}

// summarize logs the one-line summary every interval until ctx ends.
func summarize(ctx context.Context, w *consumer.Worker, logger *slog.Logger, every time.Duration) {
	if every <= 0 {
		<-ctx.Done()
		return
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			logger.Info(w.Stats().Summary())
		}
	}
}
