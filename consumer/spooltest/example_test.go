package spooltest_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/spoolq/spool/consumer"
	"github.com/spoolq/spool/consumer/spooltest"
	spool "github.com/spoolq/spool/shared"
)

// A program's handler runs against a real embedded server: enqueue (here a
// raw publish by the wire contract; the producer package does the same),
// wait until the queue is drained, read the result. In a test, Start(t)
// replaces New and Close, and Run(t, mux) starts the worker.
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	srv, err := spooltest.New(ctx)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer srv.Close()

	mux := consumer.NewMux()
	mux.HandleFunc("text.upper", func(_ context.Context, t *consumer.Task) ([]byte, error) {
		return []byte(strings.ToUpper(string(t.Payload))), nil
	})
	nc, err := nats.Connect(srv.URL)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer nc.Close()
	w, err := consumer.New(nc, mux)
	if err != nil {
		fmt.Println(err)
		return
	}
	if err := w.Start(ctx); err != nil {
		fmt.Println(err)
		return
	}
	defer w.Stop(ctx) //nolint:errcheck // the example ends here

	msg := nats.NewMsg("spool.tasks.normal.text.upper")
	msg.Header.Set(spool.HeaderMsgID, "task-1")
	msg.Data = []byte("hello")
	if _, err := srv.JS.PublishMsg(ctx, msg); err != nil {
		fmt.Println(err)
		return
	}
	if err := srv.Wait(ctx); err != nil {
		fmt.Println(err)
		return
	}
	kv, err := srv.JS.KeyValue(ctx, srv.Names.ResultsBucket())
	if err != nil {
		fmt.Println(err)
		return
	}
	e, err := kv.Get(ctx, "task-1")
	if err != nil {
		fmt.Println(err)
		return
	}
	var doc spool.Result
	if err := json.Unmarshal(e.Value(), &doc); err != nil {
		fmt.Println(err)
		return
	}
	out, _ := doc.Output()
	fmt.Println(doc.State, string(out))
	// Output: completed HELLO
}
