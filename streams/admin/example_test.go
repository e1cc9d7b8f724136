package admin_test

import (
	"context"
	"fmt"
	"log"
	"log/slog"

	"github.com/nats-io/nats.go"

	spool "github.com/spoolq/spool/shared"
	"github.com/spoolq/spool/streams/admin"
	"github.com/spoolq/spool/streams/dlq"
)

// Example reads a deployment's status, its fleet and its dead letters, and
// replays them. nc is any connected *nats.Conn; the client never closes it.
func Example() {
	ctx := context.Background()
	nc, err := nats.Connect(nats.DefaultURL)
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Close()

	c, err := admin.New(nc, admin.WithLogger(slog.Default())) // admin.WithNames(cfg.Names()) for another prefix
	if err != nil {
		log.Fatal(err)
	}
	st, err := c.Status(ctx)
	if err != nil {
		log.Fatal(err)
	}
	for _, p := range st.Priorities {
		fmt.Println(p.Priority, "pending", p.Pending, "in flight", p.InFlight, "oldest wait", p.OldestWait)
	}
	fl, err := c.Fleet(ctx)
	if err != nil {
		log.Fatal(err)
	}
	for _, w := range fl.Workers {
		if w.Stats != nil {
			fmt.Println(w.WorkerName(), w.Stats.Busy, "of", w.Stats.Slots, "slots busy")
		}
	}
	if p := fl.Totals.Counters.Pickup; p != nil {
		fmt.Println("fleet pickup p99", p.P99)
	}
	page, err := c.DeadLetters(ctx, dlq.Filter{Reason: spool.ReasonTimeout})
	if err != nil {
		log.Fatal(err)
	}
	for _, l := range page.Letters {
		if _, err := c.Replay(ctx, l.Seq); err != nil {
			log.Fatal(err)
		}
	}
}
