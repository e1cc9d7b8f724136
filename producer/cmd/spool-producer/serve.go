package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"go.opentelemetry.io/otel/trace"

	"github.com/spoolq/spool/producer/httpapi"
	"github.com/spoolq/spool/shared/jsproto"
	"github.com/spoolq/spool/shared/lifecycle"
	"github.com/spoolq/spool/shared/telemetry"
	"github.com/spoolq/spool/streams/admin"
)

// shutdownTimeout bounds a graceful stop of the broker.
const shutdownTimeout = 15 * time.Second

func runServe(ctx context.Context, cfg Config, env *cmdEnv, args []string) error {
	fs := newFlags("serve", "spool-producer serve [--addr HOST:PORT]", env)
	addr := fs.String("addr", "", "listen address host:port (overrides SPOOL_HTTP_ADDR)")
	pos, err := fs.parse(args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return fmt.Errorf("serve takes no arguments, got %q", pos)
	}
	if *addr != "" {
		if err := validateAddr(*addr); err != nil {
			return fmt.Errorf("--addr: %w", err)
		}
		cfg.HTTPAddr = *addr
	}
	if err := cfg.validateServe(); err != nil {
		return err
	}
	s, err := connect(ctx, cfg, fs, false)
	if err != nil {
		return err
	}
	defer s.close()
	if err := awaitCluster(ctx, s, cfg.Startup()); err != nil {
		return err
	}
	otelCfg, err := telemetry.ConfigFromEnv(os.Getenv)
	if err != nil {
		return err
	}
	tp, stopTracing, err := telemetry.Setup(ctx, otelCfg, "spool-broker", s.logger)
	if err != nil {
		return err
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if err := stopTracing(sctx); err != nil {
			s.logger.Warn("flushing traces", "error", err)
		}
	}()
	var tracing trace.TracerProvider
	if otelCfg.Enabled() {
		tracing = tp
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	adm, err := admin.New(s.nc, admin.WithNames(cfg.Names()), admin.WithLogger(s.logger))
	if err != nil {
		return err
	}
	h := httpapi.NewHandler(s.client, adm, httpapi.Options{
		Token:          cfg.HTTPToken,
		MaxBody:        cfg.HTTPMaxBody,
		Logger:         s.logger,
		Registry:       reg,
		TracerProvider: tracing,
	})
	srv := lifecycle.NewHTTPServer(httpapi.NewServer(cfg.HTTPAddr, h, s.logger))
	if err := srv.Start(ctx); err != nil {
		return err
	}
	s.logger.InfoContext(ctx, "http broker listening", "addr", srv.Addr(), "auth", cfg.HTTPToken != "")
	fmt.Fprintf(env.stdout, "listening on http://%s\n", srv.Addr())

	select {
	case <-srv.Stopped():
		return fmt.Errorf("http broker: %w", srv.Err())
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), shutdownTimeout)
	defer cancel()
	if err := srv.Stop(sctx); err != nil {
		return fmt.Errorf("stopping the http broker: %w", err)
	}
	s.logger.InfoContext(ctx, "http broker stopped")
	return nil
}

// awaitCluster waits, up to timeout (SPOOL_STARTUP_TIMEOUT), until the
// task stream answers, retrying through a leader election and saying what
// it waits for now and then. A stream not provisioned yet is no reason to
// stay down: the broker starts, says so, and answers 503 until it is.
func awaitCluster(ctx context.Context, s *session, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	err := jsproto.Tries{Logger: s.logger, Conn: s.nc}.Do(ctx, "the task stream", s.client.Ready)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, jsproto.ErrUnavailable):
		return fmt.Errorf("starting the broker: %w (SPOOL_STARTUP_TIMEOUT is %s)", err, timeout)
	default:
		s.logger.WarnContext(ctx, "the task stream is not readable yet; serving anyway (provision it first: spool-admin provision)", "error", err)
		return nil
	}
}
