package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"go.opentelemetry.io/otel/trace"

	"github.com/spoolq/spool/producer/httpapi"
	"github.com/spoolq/spool/shared/telemetry"
)

// shutdownTimeout bounds a graceful stop of the broker.
const shutdownTimeout = 15 * time.Second

func runServe(ctx context.Context, cfg Config, env *cmdEnv, args []string) error {
	fs, url := newFlagSet("serve", env)
	addr := fs.String("addr", "", "listen address host:port (overrides SPOOL_HTTP_ADDR)")
	pos, err := parse(fs, args)
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
	s, err := connect(ctx, cfg, *url, env)
	if err != nil {
		return err
	}
	defer s.close()
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
	h := httpapi.NewHandler(s.client, httpapi.Options{
		Token:          cfg.HTTPToken,
		MaxBody:        cfg.HTTPMaxBody,
		Logger:         s.logger,
		Registry:       reg,
		TracerProvider: tracing,
	})
	srv := httpapi.NewServer(cfg.HTTPAddr, h, s.logger)
	ln, err := net.Listen("tcp", cfg.HTTPAddr)
	if err != nil {
		return fmt.Errorf("listening on %s: %w", cfg.HTTPAddr, err)
	}
	s.logger.InfoContext(ctx, "http broker listening", "addr", ln.Addr().String(), "auth", cfg.HTTPToken != "")
	fmt.Fprintf(env.stdout, "listening on http://%s\n", ln.Addr())

	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("http broker: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), shutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		return fmt.Errorf("stopping the http broker: %w", err)
	}
	if err := <-errc; !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("http broker: %w", err)
	}
	s.logger.InfoContext(ctx, "http broker stopped")
	return nil
}
