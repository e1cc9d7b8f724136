package natscli_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/spoolq/spool/producer"
	"github.com/spoolq/spool/streams"
	"github.com/spoolq/spool/streams/streamstest"
)

// The contract's unique-key recipe, run with the `nats` CLI as a raw
// producer and worker would: a claim, a release by the holder, a claim
// refused by the release's delete marker and one over it. The Go producer
// then sees the last claim's task as the holder.
func TestUniqueKeyWireExample(t *testing.T) {
	t.Parallel()
	bin := natsBin(t)
	cmds := block(t, contractBlocks(t), "$KV.spool_unique.b3JkZXI6Nw")
	if len(cmds) != 5 {
		t.Fatalf("the unique-key block has %d commands, want 5: %q", len(cmds), cmds)
	}
	env := streamstest.Start(t, streams.Settings{})
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	run(ctx, t, bin, env.URL, cmds[0])
	if out := run(ctx, t, bin, env.URL, cmds[1]); !strings.Contains(out, "order-task-1") || !strings.Contains(out, "Nats-Sequence: 1") {
		t.Fatalf("%s: %s, want the holder order-task-1 at sequence 1", cmds[1], out)
	}
	run(ctx, t, bin, env.URL, cmds[2])
	if out, err := shell(ctx, t, bin, env.URL, cmds[3]).CombinedOutput(); err == nil || !strings.Contains(string(out), "wrong last sequence") {
		t.Fatalf("%s: %v %s, want a refusal for the delete marker", cmds[3], err, out)
	}
	run(ctx, t, bin, env.URL, cmds[4])

	client, err := producer.New(env.Connect(t), producer.WithLogger(streamstest.Logger(t)))
	if err != nil {
		t.Fatal(err)
	}
	_, err = client.Enqueue(ctx, producer.Task{Type: "order.ship"}, producer.Unique("order:7", time.Hour))
	var conflict *producer.UniqueConflictError
	if !errors.As(err, &conflict) || conflict.ExistingID != "order-task-2" {
		t.Fatalf("enqueue with the unique key order:7: %v, want a conflict with order-task-2", err)
	}
}
