// Command producer is a complete Spool producer: it enqueues one task of
// type greet.hello, waits for its result and prints it.
package main

import (
	"context"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/spoolq/spool/producer"
	spool "github.com/spoolq/spool/shared"
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

	client, err := producer.New(nc)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	task := producer.NewTask("greet.hello", []byte(`{"name":"Ada"}`))
	res, err := client.Enqueue(ctx, task, producer.AtPriority(spool.High), producer.MaxRetries(3))
	if err != nil {
		return err // nothing was enqueued: bad input, no stream, a full store
	}
	if res.Warning != "" {
		log.Print(res.Warning) // stored, but no worker serves greet.hello yet
	}
	fmt.Println("enqueued", res.ID)

	doc, err := client.Wait(ctx, res.ID) // until completed, dead or cancelled
	if err != nil {
		return err
	}
	fmt.Printf("%s after %d attempt(s): %s%s\n", doc.State, doc.Attempts, doc.Result, doc.Error)
	return nil
}
