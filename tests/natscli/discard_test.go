package natscli_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/spoolq/spool/producer"
	"github.com/spoolq/spool/streams"
	"github.com/spoolq/spool/streams/streamstest"
)

// The documented marker of a discarded result, published with the `nats`
// CLI as a raw worker would, is what the Go client reads as one, while a
// KV read finds no document.
func TestDiscardedResultExample(t *testing.T) {
	t.Parallel()
	bin := natsBin(t)
	cmds := block(t, contractBlocks(t), "Spool-Result:discarded")
	env := streamstest.Start(t, streams.Settings{})
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	out := run(ctx, t, bin, env.URL, command(t, cmds, "nats pub -J '$KV.spool_results.metrics-7'"))
	client, err := producer.New(env.Connect(t), producer.WithLogger(streamstest.Logger(t)))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := client.Result(ctx, "metrics-7"); !errors.Is(err, producer.ErrResultDiscarded) {
		t.Fatalf("after %q (%s): Result gives %v, want ErrResultDiscarded", cmds[0], out, err)
	}
	if out, err := nats(t, ctx, bin, env.URL, "kv", "get", "spool_results", "metrics-7"); err == nil {
		t.Fatalf("nats kv get found a document: %s", out)
	}
}
