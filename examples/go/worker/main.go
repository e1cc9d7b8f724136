// Command worker is a complete Spool worker: it runs the tasks of type
// greet.hello until Ctrl-C, then stops gracefully.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/spoolq/spool/consumer"
	"github.com/spoolq/spool/consumer/service"
)

func main() {
	if err := run(); err != nil {
		log.Fatal(err)
	}
}

func run() error {
	url := os.Getenv("SPOOL_NATS_URL") // what every Spool binary reads
	if url == "" {
		url = nats.DefaultURL
	}
	nc, err := nats.Connect(url)
	if err != nil {
		return err
	}
	defer nc.Close()

	mux := consumer.NewMux()
	mux.HandleFunc("greet.hello", func(ctx context.Context, t *consumer.Task) ([]byte, error) {
		var in struct {
			Name string `json:"name"`
		}
		if err := json.Unmarshal(t.Payload, &in); err != nil || in.Name == "" {
			// Permanent: no retry, straight to the dead letters.
			return nil, consumer.Permanent(fmt.Errorf("want {\"name\":\"…\"}, got %s", t.Payload))
		}
		// The returned bytes are the task's result; an error is retried.
		return json.Marshal(map[string]string{"greeting": "Hello, " + in.Name + "!"})
	})
	w, err := consumer.New(nc, mux, consumer.WithConcurrency(1, 10))
	if err != nil {
		return err
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := w.Start(ctx); err != nil {
		return err
	}
	// The NATS service lists the worker and its types: producers read it to
	// warn about types nobody serves, the dashboard and nats micro show it.
	svc, err := service.Add(nc, w)
	if err != nil {
		return err
	}
	defer svc.Stop()
	log.Print("serving greet.hello, Ctrl-C stops")
	<-ctx.Done()

	// Stop pulling, let running tasks finish, hand the rest back.
	stopCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return w.Stop(stopCtx)
}
