// Package embedded starts nats-server with JetStream inside the current
// process: one server for the dev stack (make run), and one server or an
// N-node cluster for tests.
package embedded

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"syscall"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// Options configures one embedded server.
type Options struct {
	// Name is the server name; default "spool-<port>".
	Name string
	// Host to listen on; default 127.0.0.1.
	Host string
	// Port for clients; 0 picks a free port (the default), -1 as well.
	Port int
	// StoreDir holds JetStream's files. Required.
	StoreDir string
	// SyncAlways fsyncs every write before acknowledging it
	// (sync_interval: always): the durable setting.
	SyncAlways bool
	// MaxStore caps JetStream file storage in bytes; 0 means the server's
	// default (a share of the disk).
	MaxStore int64
	// Logger receives the server's log; nil keeps it quiet.
	Logger *slog.Logger
	// Debug logs the server's debug lines too (with Logger).
	Debug bool
	// Mappings are subject mappings of the server's account, source →
	// destination (a server config's `mappings`), e.g.
	// spool.Names.PartitionMapping for task partitions.
	Mappings map[string]string
}

// ReadyTimeout bounds how long Start waits for the server to accept clients.
const ReadyTimeout = 10 * time.Second

func (o Options) serverOptions() (*server.Options, error) {
	if o.StoreDir == "" {
		return nil, errors.New("embedded server: StoreDir is required")
	}
	host := o.Host
	if host == "" {
		host = "127.0.0.1"
	}
	port := o.Port
	if port == 0 {
		port = server.RANDOM_PORT
	}
	opts := &server.Options{
		ServerName:            o.Name,
		Host:                  host,
		Port:                  port,
		JetStream:             true,
		StoreDir:              o.StoreDir,
		JetStreamMaxStore:     o.MaxStore,
		SyncAlways:            o.SyncAlways,
		NoSigs:                true,
		NoLog:                 o.Logger == nil,
		Debug:                 o.Debug,
		MaxPayload:            8 << 20,
		DisableShortFirstPing: true,
	}
	return opts, nil
}

// Start starts one JetStream server and waits until it accepts clients.
func Start(o Options) (*server.Server, error) {
	opts, err := o.serverOptions()
	if err != nil {
		return nil, err
	}
	return startServer(opts, o)
}

// startServer starts a server with opts; o gives its logger and mappings.
func startServer(opts *server.Options, o Options) (*server.Server, error) {
	if opts.Port > 0 {
		// A taken port would only show as "not ready" after ReadyTimeout:
		// say so at once.
		addr := net.JoinHostPort(opts.Host, strconv.Itoa(opts.Port))
		ln, err := net.Listen("tcp", addr)
		if errors.Is(err, syscall.EADDRINUSE) {
			return nil, fmt.Errorf("embedded nats-server: %s is already in use by another process", addr)
		}
		if err != nil {
			return nil, fmt.Errorf("embedded nats-server: cannot listen on %s: %w", addr, err)
		}
		if err := ln.Close(); err != nil {
			return nil, fmt.Errorf("embedded nats-server: probing %s: %w", addr, err)
		}
	}
	s, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("creating embedded nats-server: %w", err)
	}
	if o.Logger != nil {
		// Each line names its node: a cluster's nodes share the logger.
		s.SetLogger(slogAdapter{o.Logger.With("component", "nats-server", "server", opts.ServerName)}, o.Debug, false)
	}
	for src, dst := range o.Mappings {
		if err := s.GlobalAccount().AddMapping(src, dst); err != nil {
			s.Shutdown()
			return nil, fmt.Errorf("embedded nats-server: mapping %q to %q: %w", src, dst, err)
		}
	}
	s.Start()
	if !s.ReadyForConnections(ReadyTimeout) {
		s.Shutdown()
		return nil, fmt.Errorf("embedded nats-server on %s:%d not ready after %s", opts.Host, opts.Port, ReadyTimeout)
	}
	return s, nil
}

// slogAdapter routes nats-server's logger into slog.
type slogAdapter struct{ l *slog.Logger }

func (a slogAdapter) Noticef(format string, v ...any) { a.l.Info(fmt.Sprintf(format, v...)) }
func (a slogAdapter) Warnf(format string, v ...any)   { a.l.Warn(fmt.Sprintf(format, v...)) }
func (a slogAdapter) Fatalf(format string, v ...any)  { a.l.Error(fmt.Sprintf(format, v...)) }
func (a slogAdapter) Errorf(format string, v ...any)  { a.l.Error(fmt.Sprintf(format, v...)) }
func (a slogAdapter) Debugf(format string, v ...any)  { a.l.Debug(fmt.Sprintf(format, v...)) }
func (a slogAdapter) Tracef(format string, v ...any)  { a.l.Debug(fmt.Sprintf(format, v...)) }
