package jsproto_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"

	"github.com/spoolq/spool/shared/internal/jstest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// timeout bounds what a test waits for.
const timeout = 10 * time.Second

// startServer starts an embedded JetStream server owned by tb and connects
// to it.
func startServer(tb testing.TB) (*server.Server, *nats.Conn, jetstream.JetStream) {
	tb.Helper()
	return jstest.Start(tb)
}

// testContext is a context bounded by timeout and tb's end.
func testContext(tb testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(tb.Context(), timeout)
	tb.Cleanup(cancel)
	return ctx
}

// createStream creates a stream of subjects name.> and a pull consumer of it
// with cfg (its durable name "c" when empty).
func createStream(tb testing.TB, js jetstream.JetStream, name string, cfg jetstream.ConsumerConfig) jetstream.Consumer {
	tb.Helper()
	ctx := testContext(tb)
	st, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: []string{name + ".>"}, Storage: jetstream.MemoryStorage})
	if err != nil {
		tb.Fatal(err)
	}
	if cfg.Durable == "" {
		cfg.Durable = "c"
	}
	cfg.AckPolicy = jetstream.AckExplicitPolicy
	c, err := st.CreateConsumer(ctx, cfg)
	if err != nil {
		tb.Fatal(err)
	}
	return c
}
