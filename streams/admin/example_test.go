package admin_test

import (
	"context"
	"fmt"
	"log"
	"log/slog"
	"os"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	spool "github.com/spoolq/spool/shared"
	"github.com/spoolq/spool/streams"
	"github.com/spoolq/spool/streams/admin"
	"github.com/spoolq/spool/streams/dlq"
	"github.com/spoolq/spool/streams/embedded"
)

// Example reads a queue's status, its fleet and its dead letters against an
// embedded server.
func Example() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "spool-admin-example")
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
	if err := streams.Provision(ctx, js, topo, slog.New(slog.DiscardHandler)); err != nil {
		log.Fatal(err)
	}
	if _, err := js.Publish(ctx, "spool.tasks.high.email.send", []byte(`{"to":"ada"}`)); err != nil {
		log.Fatal(err)
	}

	c, err := admin.New(nc) // admin.WithNames(cfg.Names()) for another prefix
	if err != nil {
		log.Fatal(err)
	}
	st, err := c.Status(ctx)
	if err != nil {
		log.Fatal(err)
	}
	for _, p := range st.Priorities {
		if p.Pending > 0 {
			fmt.Println(p.Priority, "pending", p.Pending)
		}
	}
	fl, err := c.Fleet(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("workers", fl.Totals.Workers)
	page, err := c.DeadLetters(ctx, dlq.Filter{Reason: spool.ReasonTimeout})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("dead letters", len(page.Letters))
	// Output:
	// high pending 1
	// workers 0
	// dead letters 0
}
