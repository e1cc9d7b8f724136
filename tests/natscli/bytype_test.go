package natscli_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/spoolq/spool/consumer"
	"github.com/spoolq/spool/producer"
	spool "github.com/spoolq/spool/shared"
	"github.com/spoolq/spool/streams"
	"github.com/spoolq/spool/streams/streamstest"
)

// TestContractTypeConsumer runs the contract's raw worker of one type, read
// from the doc, where workers pull by type: the stream info shows the mode
// and the template, and the create request the doc spells is the very
// configuration a Go worker makes, so it answers a consumer, not error
// 10148, when the Go worker made it first; a task of the type then runs.
func TestContractTypeConsumer(t *testing.T) {
	t.Parallel()
	bin := natsBin(t)
	cmds := block(t, contractBlocks(t), "$JS.API.CONSUMER.CREATE.SPOOL_TASKS.spool-high-email~send")
	env := streamstest.Start(t, streams.Settings{Consumers: streams.ConsumersByType})
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()

	out := run(ctx, t, bin, env.URL, command(t, cmds, "nats stream info SPOOL_TASKS --json"))
	var info struct {
		Config struct {
			Metadata map[string]string `json:"metadata"`
		} `json:"config"`
	}
	if err := json.Unmarshal([]byte(out), &info); err != nil {
		t.Fatalf("nats stream info --json: %v\n%s", err, out)
	}
	md := info.Config.Metadata
	if md["spool_consumers"] != "type" || md["spool_ack_wait"] != "30s" || md["spool_max_deliver"] != "10" || md["spool_max_ack_pending"] != "100000" {
		t.Errorf("the task stream's metadata %v lacks the mode or the template the contract shows", md)
	}

	// A Go worker of email.send makes the consumers; the doc's request for
	// the same consumer then finds its configuration identical.
	ran := make(chan string, 1)
	mux := consumer.NewMux()
	mux.HandleFunc("email.send", func(_ context.Context, tk *consumer.Task) ([]byte, error) {
		ran <- tk.ID
		return nil, nil
	})
	startWorker(ctx, t, env.Connect(t), mux)
	run(ctx, t, bin, env.URL, command(t, cmds, "nats consumer info SPOOL_TASKS spool-high-email~send"))
	out = run(ctx, t, bin, env.URL, command(t, cmds, "nats req '$JS.API.CONSUMER.CREATE.SPOOL_TASKS.spool-high-email~send.spool.tasks.high.email.send'"))
	if strings.Contains(out, `"error"`) || !strings.Contains(out, `"name":"spool-high-email~send"`) {
		t.Errorf("the contract's create request, beside the Go worker's consumer:\n%s", out)
	}
	c, err := env.JS.Consumer(ctx, env.Names.TaskStream(), env.Names.TypeConsumer(spool.High, "email.send"))
	if err != nil {
		t.Fatal(err)
	}
	if got := c.CachedInfo().Config; got.FilterSubject != "spool.tasks.high.email.send" || got.AckWait != 30*time.Second || got.MaxDeliver != 10 {
		t.Errorf("consumer %s: filter %q, ack wait %s, max deliver %d", got.Durable, got.FilterSubject, got.AckWait, got.MaxDeliver)
	}

	client, err := producer.New(env.Connect(t))
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	high := spool.High
	if _, err := client.Enqueue(ctx, producer.Task{Type: "email.send", Priority: &high, ID: "welcome-ada"}); err != nil {
		t.Fatal(err)
	}
	select {
	case id := <-ran:
		if id != "welcome-ada" {
			t.Errorf("ran %s, want welcome-ada", id)
		}
	case <-ctx.Done():
		t.Fatal(fmt.Errorf("the email.send task did not run: %w", ctx.Err()))
	}
}
