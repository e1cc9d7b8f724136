// Package devstack runs Spool's development stack in one process: an
// embedded JetStream server with the topology provisioned, a worker with the
// demo handlers and the DLQ router, and the HTTP broker. `make run` starts it
// through cmd/spool-dev, and end-to-end tests start it the same way.
package devstack

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/spoolq/spool/consumer"
	"github.com/spoolq/spool/consumer/demo"
	"github.com/spoolq/spool/consumer/dlqrouter"
	"github.com/spoolq/spool/consumer/metrics"
	"github.com/spoolq/spool/consumer/service"
	"github.com/spoolq/spool/producer"
	"github.com/spoolq/spool/producer/httpapi"
	spool "github.com/spoolq/spool/shared"
	"github.com/spoolq/spool/shared/lifecycle"
	"github.com/spoolq/spool/streams"
	"github.com/spoolq/spool/streams/admin"
	"github.com/spoolq/spool/streams/dlq"
	"github.com/spoolq/spool/streams/embedded"
)

// Options configures the stack.
type Options struct {
	// Host and Port of the NATS server; Port 0 picks a free port.
	Host string
	Port int
	// StoreDir holds JetStream's files. The stack holds a lock in it while
	// it runs: a second stack on the same directory fails at once with a
	// *StoreInUseError and never opens the files.
	StoreDir string
	// SyncAlways fsyncs every write (the durable setting).
	SyncAlways bool
	// Names of the topology; zero means the default prefix.
	Names spool.Names
	// Settings of the topology; zero fields take defaults.
	Settings streams.Settings
	// Logger for the stack; the NATS server logs only warnings and errors.
	Logger *slog.Logger
	// Worker runs a worker with the demo handlers (demo.echo, demo.sleep,
	// demo.fail, demo.progress) and the DLQ router.
	Worker bool
	// WorkerOptions are extra options for that worker.
	WorkerOptions []consumer.Option
	// MetricsAddr, when set with Worker, serves the worker's Prometheus
	// metrics on /metrics there ("127.0.0.1:0" picks a free port), as
	// spool-consumer does on SPOOL_METRICS_ADDR.
	MetricsAddr string
	// BrokerAddr, when set, serves the HTTP broker there ("127.0.0.1:0"
	// picks a free port).
	BrokerAddr string
	// BrokerToken, when set, is the bearer token the broker requires.
	BrokerToken string
}

// Stack is a running development stack.
type Stack struct {
	Server *server.Server
	// URL is the NATS client URL.
	URL   string
	Names spool.Names
	// Worker and Router are nil unless Options.Worker was set; Service is
	// the worker's NATS micro service (spool-consumer), so `nats micro ls`
	// lists it.
	Worker  *consumer.Worker
	Router  *dlqrouter.Router
	Service micro.Service
	// BrokerURL is the broker's base URL ("http://127.0.0.1:8080"), empty
	// without a broker.
	BrokerURL string
	// MetricsURL is the worker's metrics URL ("http://127.0.0.1:9090/metrics"),
	// empty without Options.MetricsAddr.
	MetricsURL string

	logger   *slog.Logger
	conn     *nats.Conn
	workerNC *nats.Conn
	client   *producer.Client
	broker   *lifecycle.HTTPServer
	metrics  *http.Server
	scraped  chan struct{}
	lock     *storeLock
}

// Start starts the server and provisions the topology.
func Start(ctx context.Context, o Options) (*Stack, error) {
	if o.Names == (spool.Names{}) {
		o.Names = spool.DefaultNames()
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	topo, err := streams.New(o.Names, o.Settings)
	if err != nil {
		return nil, err
	}
	lock, err := lockStore(o.StoreDir)
	if err != nil {
		return nil, err
	}
	srv, err := embedded.Start(embedded.Options{
		Name:       "spool-dev",
		Host:       o.Host,
		Port:       o.Port,
		StoreDir:   o.StoreDir,
		SyncAlways: o.SyncAlways,
		Logger:     quietServerLogger(o.Logger),
	})
	if err != nil {
		lock.unlock()
		return nil, err
	}
	st := &Stack{Server: srv, URL: srv.ClientURL(), Names: o.Names, logger: o.Logger, lock: lock}
	st.conn, err = nats.Connect(st.URL, nats.Name("spool-dev"))
	if err != nil {
		st.Stop()
		return nil, fmt.Errorf("connecting to the dev server: %w", err)
	}
	js, err := jetstream.New(st.conn)
	if err != nil {
		st.Stop()
		return nil, fmt.Errorf("opening JetStream: %w", err)
	}
	if err := streams.Provision(ctx, js, topo, o.Logger); err != nil {
		st.Stop()
		return nil, err
	}
	if o.Worker {
		if err := st.startWorker(ctx, o); err != nil {
			st.Stop()
			return nil, err
		}
	}
	if o.BrokerAddr != "" {
		if err := st.startBroker(ctx, o); err != nil {
			st.Stop()
			return nil, err
		}
	}
	return st, nil
}

// startWorker runs a worker with the demo handlers and a DLQ router on a
// connection of their own, as a separate spool-consumer process would.
func (s *Stack) startWorker(ctx context.Context, o Options) error {
	var err error
	s.workerNC, err = nats.Connect(s.URL, nats.Name("spool-dev-worker"), nats.MaxReconnects(-1))
	if err != nil {
		return fmt.Errorf("connecting the worker: %w", err)
	}
	mux := consumer.NewMux()
	demo.Register(mux)
	opts := append([]consumer.Option{
		consumer.WithNames(s.Names),
		consumer.WithLogger(s.logger.With("component", "worker")),
		consumer.WithWorkerName("spool-dev-worker"),
	}, o.WorkerOptions...)
	if s.Worker, err = consumer.New(s.workerNC, mux, opts...); err != nil {
		return fmt.Errorf("creating the worker: %w", err)
	}
	if err := s.Worker.Start(ctx); err != nil {
		return fmt.Errorf("starting the worker: %w", err)
	}
	s.Router, err = dlqrouter.New(s.workerNC,
		dlqrouter.WithNames(s.Names),
		dlqrouter.WithLogger(s.logger),
		dlqrouter.WithWorker("spool-dev-worker/dlq-router"),
	)
	if err != nil {
		return fmt.Errorf("creating the dlq router: %w", err)
	}
	if err := s.Router.Start(ctx); err != nil {
		return fmt.Errorf("starting the dlq router: %w", err)
	}
	svcOpts := []service.Option{service.WithRouter(s.Router)}
	if o.MetricsAddr != "" {
		addr, err := s.serveMetrics(ctx, o.MetricsAddr)
		if err != nil {
			return err
		}
		svcOpts = append(svcOpts, service.WithMetadata(map[string]string{"metrics_addr": addr}))
	}
	if s.Service, err = service.Add(s.workerNC, s.Worker, svcOpts...); err != nil {
		return fmt.Errorf("registering the worker's service: %w", err)
	}
	return nil
}

// serveMetrics serves the worker's metrics on addr and returns the address
// listened on.
func (s *Stack) serveMetrics(ctx context.Context, addr string) (string, error) {
	js, err := jetstream.New(s.workerNC)
	if err != nil {
		return "", fmt.Errorf("opening JetStream: %w", err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(metrics.New(context.WithoutCancel(ctx), s.Worker, metrics.WithRouter(s.Router),
		metrics.WithDeadLetters(dlq.New(js, s.Names).Size)))
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", fmt.Errorf("listening for metrics on %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.Handle("GET /healthz", metrics.Healthz(s.Worker))
	mux.Handle("GET /readyz", metrics.Readyz(s.Worker, s.workerNC))
	s.metrics = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	s.MetricsURL = "http://" + ln.Addr().String() + "/metrics"
	s.scraped = make(chan struct{})
	go func() {
		defer close(s.scraped)
		if err := s.metrics.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			s.logger.Error("metrics listener stopped", "error", err)
		}
	}()
	return ln.Addr().String(), nil
}

// startBroker serves the HTTP broker on o.BrokerAddr.
func (s *Stack) startBroker(ctx context.Context, o Options) error {
	var err error
	s.client, err = producer.New(s.conn, producer.WithNames(s.Names), producer.WithLogger(s.logger.With("component", "broker")))
	if err != nil {
		return fmt.Errorf("creating the producer client: %w", err)
	}
	adm, err := admin.New(s.conn, admin.WithNames(s.Names), admin.WithLogger(s.logger.With("component", "broker")))
	if err != nil {
		return fmt.Errorf("creating the admin client: %w", err)
	}
	h := httpapi.NewHandler(s.client, adm, httpapi.Options{Token: o.BrokerToken, Logger: s.logger.With("component", "broker")})
	s.broker = lifecycle.NewHTTPServer(httpapi.NewServer(o.BrokerAddr, h, s.logger.With("component", "broker")))
	if err := s.broker.Start(ctx); err != nil {
		return fmt.Errorf("starting the broker: %w", err)
	}
	s.BrokerURL = "http://" + s.broker.Addr()
	return nil
}

// StopTimeout bounds the graceful part of Stop: the broker's in-flight
// requests and the worker's running tasks.
const StopTimeout = 30 * time.Second

// Stop shuts the stack down gracefully: the broker finishes its requests,
// the worker its running tasks (unfinished ones are handed back), then the
// server stops and Stop waits for it.
func (s *Stack) Stop() {
	ctx, cancel := context.WithTimeout(context.Background(), StopTimeout)
	defer cancel()
	if s.broker != nil {
		if err := s.broker.Stop(ctx); err != nil {
			s.logger.Warn("stopping the broker", "error", err)
		}
	}
	if s.client != nil {
		s.client.Close()
	}
	if s.metrics != nil {
		if err := s.metrics.Shutdown(ctx); err != nil {
			s.logger.Warn("stopping the metrics listener", "error", err)
		}
		<-s.scraped
	}
	if s.Service != nil {
		if err := s.Service.Stop(); err != nil {
			s.logger.Warn("stopping the worker's service", "error", err)
		}
	}
	if s.Router != nil {
		if err := s.Router.Stop(ctx); err != nil {
			s.logger.Warn("stopping the dlq router", "error", err)
		}
	}
	if s.Worker != nil {
		if err := s.Worker.Stop(ctx); err != nil {
			s.logger.Warn("stopping the worker", "error", err)
		}
	}
	if s.workerNC != nil {
		s.workerNC.Close()
	}
	if s.conn != nil {
		s.conn.Close()
	}
	s.Server.Shutdown()
	s.Server.WaitForShutdown()
	s.lock.unlock()
}

// quietServerLogger keeps the server's warnings and errors only.
func quietServerLogger(l *slog.Logger) *slog.Logger {
	if l == nil {
		return nil
	}
	return slog.New(levelFilter{l.Handler(), slog.LevelWarn})
}

type levelFilter struct {
	slog.Handler
	min slog.Level
}

func (f levelFilter) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= f.min && f.Handler.Enabled(ctx, l)
}
func (f levelFilter) WithAttrs(a []slog.Attr) slog.Handler {
	return levelFilter{f.Handler.WithAttrs(a), f.min}
}
func (f levelFilter) WithGroup(n string) slog.Handler {
	return levelFilter{f.Handler.WithGroup(n), f.min}
}
