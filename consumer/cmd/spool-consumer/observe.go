package main

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/spoolq/spool/consumer"
	"github.com/spoolq/spool/consumer/metrics"
	"github.com/spoolq/spool/shared/lifecycle"
)

// metricsOff turns the metrics and health listener off.
const metricsOff = "off"

// observer serves /metrics, /healthz and /readyz.
type observer struct {
	reg    *prometheus.Registry
	srv    *lifecycle.HTTPServer // nil when off
	addr   string                // the address listened on, port resolved; empty when off
	logger *slog.Logger
}

// startObserver listens on addr (metricsOff: nowhere) and serves the
// process's registry and the worker's health. The registry holds the Go and
// process collectors; the caller adds the worker's.
func startObserver(ctx context.Context, addr string, w *consumer.Worker, nc *nats.Conn, logger *slog.Logger) (*observer, error) {
	o := &observer{reg: prometheus.NewRegistry(), logger: logger}
	o.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	if addr == metricsOff {
		return o, nil
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(o.reg, promhttp.HandlerOpts{
		ErrorLog:      slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
		ErrorHandling: promhttp.ContinueOnError,
	}))
	mux.Handle("GET /healthz", metrics.Healthz(w))
	mux.Handle("GET /readyz", metrics.Readyz(w, nc))
	o.srv = lifecycle.NewHTTPServer(&http.Server{
		Addr:              addr,
		Handler:           mux,
		ReadHeaderTimeout: 5 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       time.Minute,
		ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
	})
	if err := o.srv.Start(ctx); err != nil {
		return nil, fmt.Errorf("SPOOL_METRICS_ADDR: %w", err)
	}
	o.addr = o.srv.Addr()
	logger.Info("serving /metrics, /healthz and /readyz", "metrics_addr", o.addr)
	return o, nil
}

// stop shuts the listener down within ctx.
func (o *observer) stop(ctx context.Context) error {
	if o.srv == nil {
		return nil
	}
	if err := o.srv.Stop(ctx); err != nil {
		return fmt.Errorf("stopping the metrics listener: %w", err)
	}
	if err := o.srv.Err(); err != nil {
		return fmt.Errorf("metrics listener: %w", err)
	}
	return nil
}
