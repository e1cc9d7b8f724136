// Package devstack runs Spool's development stack in one process: an
// embedded JetStream server with the topology provisioned. `make run` starts
// it through cmd/spool-dev, and end-to-end tests start it the same way.
package devstack

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	spool "github.com/spoolq/spool/shared"
	"github.com/spoolq/spool/streams"
	"github.com/spoolq/spool/streams/embedded"
)

// Options configures the stack.
type Options struct {
	// Host and Port of the NATS server; Port 0 picks a free port.
	Host string
	Port int
	// StoreDir holds JetStream's files.
	StoreDir string
	// SyncAlways fsyncs every write (the durable setting).
	SyncAlways bool
	// Names of the topology; zero means the default prefix.
	Names spool.Names
	// Settings of the topology; zero fields take defaults.
	Settings streams.Settings
	// Logger for the stack; the NATS server logs only warnings and errors.
	Logger *slog.Logger
}

// Stack is a running development stack.
type Stack struct {
	Server *server.Server
	// URL is the NATS client URL.
	URL   string
	Names spool.Names
	conn  *nats.Conn
}

// Start starts the server and provisions the topology.
func Start(ctx context.Context, o Options) (*Stack, error) {
	if o.Names == (spool.Names{}) {
		o.Names = spool.DefaultNames()
	}
	topo, err := streams.New(o.Names, o.Settings)
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
		return nil, err
	}
	st := &Stack{Server: srv, URL: srv.ClientURL(), Names: o.Names}
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
	return st, nil
}

// Stop shuts the stack down and waits for the server to stop.
func (s *Stack) Stop() {
	if s.conn != nil {
		s.conn.Close()
	}
	s.Server.Shutdown()
	s.Server.WaitForShutdown()
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
