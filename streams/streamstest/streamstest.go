// Package streamstest gives tests a real JetStream to run against: an
// embedded server (or an in-process cluster) owned by the test, its store in
// t.TempDir(), Spool's topology provisioned, and a connection. Everything is
// shut down by t.Cleanup. It also holds the small waiting helpers every
// Spool test needs, so no test sleeps to wait for something.
package streamstest

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	spool "github.com/spoolq/spool/shared"
	"github.com/spoolq/spool/streams"
	"github.com/spoolq/spool/streams/embedded"
)

// Timeout bounds the I/O of one test when it gives no deadline of its own.
const Timeout = 30 * time.Second

// Env is a provisioned JetStream owned by one test.
type Env struct {
	// URL is the client URL (comma-separated for a cluster).
	URL string
	// Server is the single server; nil for a cluster.
	Server *server.Server
	// Cluster is the cluster; nil for a single server.
	Cluster  *embedded.Cluster
	NC       *nats.Conn
	JS       jetstream.JetStream
	Names    spool.Names
	Topology streams.Topology
}

// Start starts one file-storage server owned by t and provisions the default
// topology with settings (zero fields take defaults).
func Start(t testing.TB, settings streams.Settings) *Env {
	t.Helper()
	return StartWith(t, embedded.Options{}, settings)
}

// StartWith is Start with server options; an empty StoreDir becomes
// t.TempDir().
func StartWith(t testing.TB, opts embedded.Options, settings streams.Settings) *Env {
	t.Helper()
	if opts.StoreDir == "" {
		opts.StoreDir = t.TempDir()
	}
	s, err := embedded.Start(opts)
	if err != nil {
		t.Fatalf("starting an embedded server: %v", err)
	}
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	e := &Env{URL: s.ClientURL(), Server: s}
	e.provision(t, settings)
	return e
}

// StartCluster starts an n-node cluster owned by t and provisions the
// topology with n replicas. With settings.Partitions > 1 the servers carry
// the partition mapping of the default prefix.
func StartCluster(t testing.TB, n int, settings streams.Settings) *Env {
	t.Helper()
	opts := embedded.Options{StoreDir: t.TempDir(), Name: "test"}
	if settings.Partitions > 1 {
		// The servers spread task publishes of the default prefix.
		src, dst := spool.DefaultNames().PartitionMapping(settings.Partitions)
		opts.Mappings = map[string]string{src: dst}
	}
	c, err := embedded.StartCluster(n, opts)
	if err != nil {
		t.Fatalf("starting an embedded cluster: %v", err)
	}
	t.Cleanup(c.Shutdown)
	settings.Replicas = n
	e := &Env{URL: c.ClientURLs(), Cluster: c}
	e.provision(t, settings)
	return e
}

func (e *Env) provision(t testing.TB, settings streams.Settings) {
	t.Helper()
	e.NC = e.Connect(t)
	var err error
	if e.JS, err = jetstream.New(e.NC); err != nil {
		t.Fatal(err)
	}
	e.Names = spool.DefaultNames()
	if e.Topology, err = streams.New(e.Names, settings); err != nil {
		t.Fatal(err)
	}
	if err := streams.Provision(Context(t), e.JS, e.Topology, Logger(t)); err != nil {
		t.Fatalf("provisioning: %v", err)
	}
}

// Connect opens another connection, closed by t.Cleanup. It reconnects
// forever, as Spool's processes do.
func (e *Env) Connect(t testing.TB, opts ...nats.Option) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(e.URL, append([]nats.Option{nats.MaxReconnects(-1), nats.ReconnectWait(50 * time.Millisecond)}, opts...)...)
	if err != nil {
		t.Fatalf("connecting to %s: %v", e.URL, err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// Stream returns a stream handle of this env, failing the test if missing.
func (e *Env) Stream(t testing.TB, name string) jetstream.Stream {
	t.Helper()
	s, err := e.JS.Stream(Context(t), name)
	if err != nil {
		t.Fatalf("stream %s: %v", name, err)
	}
	return s
}

// Logger routes slog output to the test log.
func Logger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// Context is t.Context bounded by Timeout.
func Context(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), Timeout)
	t.Cleanup(cancel)
	return ctx
}

// WaitFor calls cond every few milliseconds until it returns nil, and fails
// the test with cond's last error when timeout passes first.
func WaitFor(t testing.TB, timeout time.Duration, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("condition not met within %s: %v", timeout, err)
		}
		select {
		case <-tick.C:
		case <-t.Context().Done():
			t.Fatalf("test ended while waiting: %v", err)
		}
	}
}

// Held returns the subjects of the messages sub (a SubscribeSync) holds
// now, taking them. Call it after the round trips that make the server
// deliver what the test waits for (a Flush on the publisher's connection,
// then on the subscriber's): it does not wait for more.
func Held(sub *nats.Subscription) []string {
	var subjects []string
	for {
		m, err := sub.NextMsg(10 * time.Millisecond)
		if err != nil {
			return subjects
		}
		subjects = append(subjects, m.Subject)
	}
}
