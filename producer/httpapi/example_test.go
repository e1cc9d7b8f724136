package httpapi_test

import (
	"context"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/spoolq/spool/producer"
	"github.com/spoolq/spool/producer/httpapi"
	spool "github.com/spoolq/spool/shared"
	"github.com/spoolq/spool/shared/lifecycle"
	"github.com/spoolq/spool/streams"
	"github.com/spoolq/spool/streams/admin"
	"github.com/spoolq/spool/streams/embedded"
)

// Example runs the broker in-process against an embedded server and
// enqueues a task over HTTP. In a real process, serve the handler with
// httpapi.NewServer (see ExampleNewServer).
func Example() {
	dir, err := os.MkdirTemp("", "spool-httpapi-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	srv, err := embedded.Start(embedded.Options{StoreDir: dir})
	if err != nil {
		log.Fatal(err)
	}
	defer func() { srv.Shutdown(); srv.WaitForShutdown() }()
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		log.Fatal(err)
	}
	topo, err := streams.New(spool.DefaultNames(), streams.Settings{})
	if err != nil {
		log.Fatal(err)
	}
	if err := streams.Provision(context.Background(), js, topo, slog.New(slog.DiscardHandler)); err != nil {
		log.Fatal(err)
	}

	client, err := producer.New(nc)
	if err != nil {
		log.Fatal(err)
	}
	adm, err := admin.New(nc)
	if err != nil {
		log.Fatal(err)
	}
	broker := httptest.NewServer(httpapi.NewHandler(client, adm, httpapi.Options{}))
	defer broker.Close()

	resp, err := http.Post(broker.URL+"/v1/tasks", "application/json",
		strings.NewReader(`{"type":"email.send","priority":"high","id":"welcome-1","payload":{"to":"ada@example.com"}}`))
	if err != nil {
		log.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(resp.StatusCode, strings.Contains(string(body), `"subject":"spool.tasks.high.email.send"`))

	resp, err = http.Post(broker.URL+"/v1/tasks", "application/json", strings.NewReader(`{"type":"email.send","priority":"urgent"}`))
	if err != nil {
		log.Fatal(err)
	}
	body, err = io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(resp.StatusCode, strings.Contains(string(body), `"code":"invalid_priority"`))
	// Output:
	// 201 true
	// 400 true
}

// ExampleNewServer starts the broker in-process on 127.0.0.1:8080 (the dev
// stack does this) and stops it gracefully when ctx ends. nc is a connected
// *nats.Conn the broker never closes.
func ExampleNewServer() {
	ctx := context.Background() // the process's lifetime
	logger := slog.Default()
	nc, err := nats.Connect(nats.DefaultURL)
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Close()

	client, err := producer.New(nc, producer.WithLogger(logger)) // producer.WithNames(names) for another prefix
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	adm, err := admin.New(nc, admin.WithLogger(logger)) // the dashboard, /metrics and the dead-letter routes
	if err != nil {
		log.Fatal(err)
	}
	h := httpapi.NewHandler(client, adm, httpapi.Options{Logger: logger}) // Token: "…" requires a bearer token
	srv := lifecycle.NewHTTPServer(httpapi.NewServer("127.0.0.1:8080", h, logger))
	if err := srv.Start(ctx); err != nil {
		log.Fatal(err)
	}

	select {
	case <-ctx.Done():
	case <-srv.Stopped():
		logger.Error("http broker stopped", "error", srv.Err())
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 15*time.Second)
	defer cancel()
	if err := srv.Stop(sctx); err != nil {
		logger.Error("stopping the http broker", "error", err)
	}
}
