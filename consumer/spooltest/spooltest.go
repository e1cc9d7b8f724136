package spooltest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/spoolq/spool/consumer"
	spool "github.com/spoolq/spool/shared"
	"github.com/spoolq/spool/shared/logging"
	"github.com/spoolq/spool/streams"
	"github.com/spoolq/spool/streams/embedded"
)

// Server is an embedded NATS server with Spool's topology and a connection
// to it.
type Server struct {
	// URL is the client URL (nats://127.0.0.1:<port>).
	URL string
	// NC is a connection for the test's own use (a producer, a raw
	// publish); Close closes it.
	NC *nats.Conn
	// JS is JetStream on NC.
	JS jetstream.JetStream
	// Names are the default names (prefix "spool").
	Names spool.Names

	srv      *server.Server
	dir      string
	topology streams.Topology
	logger   *slog.Logger
}

// Option configures New and Start.
type Option func(*config)

type config struct {
	settings streams.Settings
	logger   *slog.Logger
}

// WithSettings provisions the topology with settings (zero fields take
// Spool's defaults). Default: all defaults.
func WithSettings(s streams.Settings) Option { return func(c *config) { c.settings = s } }

// WithLogger receives the provisioning and worker logs. Default (and nil):
// warnings and errors on standard error (logging.OrDefault); Start: the
// test's log.
func WithLogger(l *slog.Logger) Option { return func(c *config) { c.logger = l } }

// New starts a server whose store is a new temporary directory, provisions
// the topology and connects. Close undoes it all.
func New(ctx context.Context, opts ...Option) (*Server, error) {
	var c config
	for _, o := range opts {
		o(&c)
	}
	c.logger = logging.OrDefault(c.logger)
	dir, err := os.MkdirTemp("", "spooltest-")
	if err != nil {
		return nil, fmt.Errorf("spooltest: creating the store directory: %w", err)
	}
	s := &Server{dir: dir, Names: spool.DefaultNames(), logger: c.logger}
	if err := s.start(ctx, c.settings); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

func (s *Server) start(ctx context.Context, settings streams.Settings) error {
	var err error
	if s.srv, err = embedded.Start(embedded.Options{StoreDir: s.dir}); err != nil {
		return fmt.Errorf("spooltest: %w", err)
	}
	s.URL = s.srv.ClientURL()
	if s.NC, err = nats.Connect(s.URL); err != nil {
		return fmt.Errorf("spooltest: connecting to %s: %w", s.URL, err)
	}
	if s.JS, err = jetstream.New(s.NC); err != nil {
		return fmt.Errorf("spooltest: %w", err)
	}
	if s.topology, err = streams.New(s.Names, settings); err != nil {
		return fmt.Errorf("spooltest: %w", err)
	}
	if err := streams.Provision(ctx, s.JS, s.topology, s.logger); err != nil {
		return fmt.Errorf("spooltest: provisioning: %w", err)
	}
	return nil
}

// Close closes the connection, stops the server and removes its store.
// Stop the workers first (Run's cleanup does, for Start).
func (s *Server) Close() {
	if s.NC != nil {
		s.NC.Close()
	}
	if s.srv != nil {
		s.srv.Shutdown()
		s.srv.WaitForShutdown()
	}
	_ = os.RemoveAll(s.dir) // a temporary directory: nothing to keep
}

// Start is New for a test: the logs go to the test's log, a failure fails
// the test, and t.Cleanup closes the server.
func Start(t testing.TB, opts ...Option) *Server {
	t.Helper()
	l := slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))
	s, err := New(t.Context(), append([]Option{WithLogger(l)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

// Run starts a worker serving h (a *consumer.Mux, usually) on its own
// connection, with fast retries (10ms, doubling up to 100ms) unless opts
// say otherwise, and stops it when the test ends.
func (s *Server) Run(t testing.TB, h consumer.Handler, opts ...consumer.Option) *consumer.Worker {
	t.Helper()
	nc, err := nats.Connect(s.URL)
	if err != nil {
		t.Fatalf("spooltest: connecting a worker: %v", err)
	}
	base := []consumer.Option{consumer.WithLogger(s.logger), consumer.WithRetry(10*time.Millisecond, 100*time.Millisecond, spool.DefaultMaxRetries)}
	w, err := consumer.New(nc, h, append(base, opts...)...)
	if err != nil {
		nc.Close()
		t.Fatalf("spooltest: %v", err)
	}
	if err := w.Start(t.Context()); err != nil {
		nc.Close()
		t.Fatalf("spooltest: starting the worker: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := w.Stop(ctx); err != nil {
			t.Errorf("spooltest: stopping the worker: %v", err)
		}
		nc.Close()
	})
	return w
}

// Drained reports whether no task is left: the task stream holds no
// message (queued, running, waiting for a retry, or scheduled).
func (s *Server) Drained(ctx context.Context) (bool, error) {
	st, err := s.JS.Stream(ctx, s.Names.TaskStream())
	if err != nil {
		return false, fmt.Errorf("spooltest: %w", err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		return false, fmt.Errorf("spooltest: %w", err)
	}
	return info.State.Msgs == 0, nil
}

// WaitDrained waits until every task is done (completed or dead-lettered,
// and acknowledged), failing the test after timeout.
func (s *Server) WaitDrained(t testing.TB, timeout time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), timeout)
	defer cancel()
	if err := s.Wait(ctx); err != nil {
		t.Fatalf("spooltest: tasks still queued after %s: %v", timeout, err)
	}
}

// Wait polls Drained until it is true or ctx ends.
func (s *Server) Wait(ctx context.Context) error {
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		done, err := s.Drained(ctx)
		if done {
			return nil
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			return errors.Join(ctx.Err(), err)
		}
	}
}

// Result returns the result document of task id, failing the test when
// there is none.
func (s *Server) Result(t testing.TB, id string) spool.Result {
	t.Helper()
	kv, err := s.JS.KeyValue(t.Context(), s.Names.ResultsBucket())
	if err != nil {
		t.Fatalf("spooltest: %v", err)
	}
	e, err := kv.Get(t.Context(), id)
	if err != nil {
		t.Fatalf("spooltest: the result of task %s: %v", id, err)
	}
	var doc spool.Result
	if err := json.Unmarshal(e.Value(), &doc); err != nil {
		t.Fatalf("spooltest: the result of task %s: %v", id, err)
	}
	return doc
}

// DeadLetters counts the dead letters.
func (s *Server) DeadLetters(t testing.TB) uint64 {
	t.Helper()
	st, err := s.JS.Stream(t.Context(), s.Names.DLQStream())
	if err != nil {
		t.Fatalf("spooltest: %v", err)
	}
	info, err := st.Info(t.Context())
	if err != nil {
		t.Fatalf("spooltest: %v", err)
	}
	return info.State.Msgs
}

// Reset empties the task stream, the dead letters, the results and the
// unique keys, so the next case starts clean. Stop workers that could
// still be writing first, or expect their late writes.
func (s *Server) Reset(t testing.TB) {
	t.Helper()
	for _, name := range []string{s.Names.TaskStream(), s.Names.DLQStream(), s.Names.AdvisoryStream(),
		"KV_" + s.Names.ResultsBucket(), "KV_" + s.Names.UniqueBucket()} {
		st, err := s.JS.Stream(t.Context(), name)
		if err != nil {
			t.Fatalf("spooltest: reset: %v", err)
		}
		if err := st.Purge(t.Context()); err != nil {
			t.Fatalf("spooltest: reset: purging %s: %v", name, err)
		}
	}
}
