package remote_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/spoolq/spool/consumer"
	"github.com/spoolq/spool/consumer/remote"
	spool "github.com/spoolq/spool/shared"
	"github.com/spoolq/spool/streams/embedded"
)

// A remote handler: the responder below uses plain nats.go and could as well
// be written in Python, Rust or anything else with a NATS client. It answers
// each request with the result in the body, or with Spool-Error (and
// Spool-Permanent: true when retrying cannot help).
func ExampleHandler() {
	dir, err := os.MkdirTemp("", "spool-example")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(dir)
	srv, err := embedded.Start(embedded.Options{StoreDir: dir})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer srv.WaitForShutdown()
	defer srv.Shutdown()

	// The responder, on its own connection.
	rc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		fmt.Println(err)
		return
	}
	defer rc.Close()
	_, err = rc.QueueSubscribe("greeter.hello", "greeters", func(m *nats.Msg) {
		reply := nats.NewMsg(m.Reply)
		name := string(m.Data)
		switch {
		case name == "":
			reply.Header.Set("Spool-Error", "no name given")
			reply.Header.Set("Spool-Permanent", "true")
		case strings.ToLower(name) == "later":
			reply.Header.Set("Spool-Error", "not now")
		default:
			reply.Data = fmt.Appendf(nil, "hello, %s (attempt %s of task %s)",
				name, m.Header.Get("Spool-Attempt"), m.Header.Get("Spool-Task-Id"))
		}
		_ = m.RespondMsg(reply)
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	if err := rc.Flush(); err != nil {
		fmt.Println(err)
		return
	}

	// The worker side: a mux routes the task type to the remote subject.
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		fmt.Println(err)
		return
	}
	defer nc.Close()
	mux := consumer.NewMux()
	mux.Handle("greet", remote.Handler(nc, "greeter.hello"))

	for _, payload := range []string{"Ada", "later", ""} {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		out, err := mux.ProcessTask(ctx, &consumer.Task{
			ID: "t1", Type: "greet", Priority: spool.Normal,
			Payload: []byte(payload), Attempt: 1, MaxAttempts: 4,
		})
		cancel()
		var rerr *remote.Error
		switch {
		case err == nil:
			fmt.Printf("result: %s\n", out)
		case errors.As(err, &rerr):
			fmt.Printf("failed: %s (permanent: %v)\n", rerr.Message, consumer.IsPermanent(err))
		default:
			fmt.Println("error:", err)
		}
	}
	// Output:
	// result: hello, Ada (attempt 1 of task t1)
	// failed: not now (permanent: false)
	// failed: no name given (permanent: true)
}
