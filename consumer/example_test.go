package consumer_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/spoolq/spool/consumer"
	spool "github.com/spoolq/spool/shared"
	"github.com/spoolq/spool/streams"
	"github.com/spoolq/spool/streams/embedded"
)

// A worker with one handler, fed by a plain JetStream publish.
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dir, err := os.MkdirTemp("", "spool-example")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	srv, err := embedded.Start(embedded.Options{StoreDir: dir})
	if err != nil {
		panic(err)
	}
	defer srv.WaitForShutdown()
	defer srv.Shutdown()
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		panic(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		panic(err)
	}
	topo, err := streams.New(spool.DefaultNames(), streams.Settings{})
	if err != nil {
		panic(err)
	}
	if err := streams.Provision(ctx, js, topo, slog.New(slog.DiscardHandler)); err != nil {
		panic(err)
	}

	done := make(chan string, 1)
	mux := consumer.NewMux()
	mux.HandleFunc("greet", func(ctx context.Context, t *consumer.Task) ([]byte, error) {
		out := fmt.Sprintf("hello, %s (attempt %d of %d)", t.Payload, t.Attempt, t.MaxAttempts)
		done <- out
		return []byte(out), nil
	})
	w, err := consumer.New(nc, mux, consumer.WithConcurrency(1, 4))
	if err != nil {
		panic(err)
	}
	if err := w.Start(ctx); err != nil {
		panic(err)
	}
	if _, err := js.Publish(ctx, "spool.tasks.high.greet", []byte("world")); err != nil {
		panic(err)
	}
	fmt.Println(<-done)
	if err := w.Stop(ctx); err != nil {
		panic(err)
	}
	fmt.Println(w.State())
	// Output:
	// hello, world (attempt 1 of 4)
	// stopped
}
