package producer_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"os"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/spoolq/spool/producer"
	spool "github.com/spoolq/spool/shared"
	"github.com/spoolq/spool/streams"
	"github.com/spoolq/spool/streams/embedded"
)

// exampleConn starts a provisioned embedded server and connects to it; stop
// shuts both down.
func exampleConn() (nc *nats.Conn, stop func()) {
	dir, err := os.MkdirTemp("", "spool-example")
	if err != nil {
		log.Fatal(err)
	}
	srv, err := embedded.Start(embedded.Options{StoreDir: dir})
	if err != nil {
		log.Fatal(err)
	}
	nc, err = nats.Connect(srv.ClientURL())
	if err != nil {
		log.Fatal(err)
	}
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
	return nc, func() {
		nc.Close()
		srv.Shutdown()
		srv.WaitForShutdown()
		os.RemoveAll(dir)
	}
}

func ExampleClient_Enqueue() {
	nc, stop := exampleConn()
	defer stop()
	ctx := context.Background()

	client, err := producer.New(nc) // the client never closes nc
	if err != nil {
		log.Fatal(err)
	}
	task := producer.NewTask("email.send", []byte(`{"to":"ada@example.com"}`))
	res, err := client.Enqueue(ctx, task, producer.TaskID("welcome-ada"), producer.MaxRetries(5))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(res.ID, res.Subject, res.Duplicate)

	// Publishing the same id again stores nothing new.
	res, err = client.Enqueue(ctx, task, producer.TaskID("welcome-ada"))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("duplicate:", res.Duplicate)
	// Output:
	// welcome-ada spool.tasks.normal.email.send false
	// duplicate: true
}

func ExampleClient_Enqueue_unique() {
	nc, stop := exampleConn()
	defer stop()
	ctx := context.Background()
	client, err := producer.New(nc)
	if err != nil {
		log.Fatal(err)
	}
	digest := producer.Task{Type: "digest.build", Priority: new(spool.Low), UniqueKey: "user-42", UniqueTTL: time.Hour}
	if _, err := client.Enqueue(ctx, digest, producer.TaskID("digest-1")); err != nil {
		log.Fatal(err)
	}
	_, err = client.Enqueue(ctx, digest, producer.TaskID("digest-2"))
	var conflict *producer.UniqueConflictError
	if errors.As(err, &conflict) {
		fmt.Println("already queued as", conflict.ExistingID)
	}
	// Output: already queued as digest-1
}

func ExampleClient_Cancel() {
	nc, stop := exampleConn()
	defer stop()
	ctx := context.Background()
	client, err := producer.New(nc)
	if err != nil {
		log.Fatal(err)
	}
	res, err := client.Enqueue(ctx, producer.NewTask("invoice.remind", nil),
		producer.TaskID("remind-7"), producer.ProcessIn(24*time.Hour))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("scheduled:", res.Scheduled, res.Subject)
	cancelled, err := client.Cancel(ctx, "remind-7")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("cancelled:", cancelled)
	cancelled, err = client.Cancel(ctx, "remind-7")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("cancelled again:", cancelled)
	// Output:
	// scheduled: true spool.sched.remind-7
	// cancelled: true
	// cancelled again: false
}

func ExampleClient_EnqueueBatch() {
	nc, stop := exampleConn()
	defer stop()
	client, err := producer.New(nc, producer.WithPublishWindow(256))
	if err != nil {
		log.Fatal(err)
	}
	tasks := []producer.Task{
		producer.NewTask("resize", []byte("a.png")),
		producer.NewTask("resize", []byte("b.png")),
		producer.NewTask("bad type!", nil),
	}
	results, err := client.EnqueueBatch(context.Background(), tasks)
	for i, r := range results {
		fmt.Println(i, r.Err == nil)
	}
	fmt.Println(err != nil, errors.Is(err, producer.ErrInvalidType))
	// Output:
	// 0 true
	// 1 true
	// 2 false
	// true true
}

func ExampleClient_Wait() {
	nc, stop := exampleConn()
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	client, err := producer.New(nc)
	if err != nil {
		log.Fatal(err)
	}
	// A consumer writes the result document; here we write it by hand.
	js, err := jetstream.New(nc)
	if err != nil {
		log.Fatal(err)
	}
	kv, err := js.KeyValue(ctx, "spool_results")
	if err != nil {
		log.Fatal(err)
	}
	if _, err := kv.PutString(ctx, "job-1", `{"id":"job-1","type":"render","priority":"normal","state":"completed","attempts":1,"result":{"pages":3},"enqueued_at":"2026-01-01T00:00:00Z"}`); err != nil {
		log.Fatal(err)
	}
	r, err := client.Wait(ctx, "job-1")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(r.State, string(r.Result))
	// Output: completed {"pages":3}
}
