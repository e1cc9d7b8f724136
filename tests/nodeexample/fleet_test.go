package nodeexample

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/spoolq/spool/consumer"
	"github.com/spoolq/spool/producer"
	spool "github.com/spoolq/spool/shared"
	"github.com/spoolq/spool/streams"
	"github.com/spoolq/spool/streams/embedded"
	"github.com/spoolq/spool/streams/streamstest"
)

// TestMixedFleet runs a Go worker serving mix.go.* and a Node worker
// serving mix.node.* on one deployment pulling by type, its tasks spread
// over two partitions: every task completes on a process that serves its
// type and none is dead for no_handler. A type nobody serves waits, and
// runs when a Node worker serving it starts.
func TestMixedFleet(t *testing.T) {
	const n = 20
	// Two task partitions, the server spreading the tasks over them: both
	// workers pull their consumers on each.
	src, dst := spool.DefaultNames().PartitionMapping(2)
	e := streamstest.StartWith(t, embedded.Options{Mappings: map[string]string{src: dst}},
		streams.Settings{Consumers: streams.ConsumersByType, Partitions: 2})
	ctx := longContext(t)
	c, err := producer.New(e.NC, producer.WithLogger(streamstest.Logger(t)))
	if err != nil {
		t.Fatal(err)
	}

	mux := consumer.NewMux()
	mux.HandleFunc("mix.go.who", func(_ context.Context, task *consumer.Task) ([]byte, error) {
		return json.Marshal(map[string]any{"worker": "go-worker", "type": task.Type})
	})
	w, err := consumer.New(e.Connect(t), mux, consumer.WithLogger(streamstest.Logger(t)), consumer.WithWorkerName("go-worker"),
		consumer.WithTypes("mix.go.*"))
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stopCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := w.Stop(stopCtx); err != nil {
			t.Error(err)
		}
	})
	startNodeWorker(t, e.URL, "node-mix", "mix.node.*")

	// Interleaved, and spread over the priorities.
	want := map[string]string{} // task id → the worker that must run it
	var late []string
	for i := range n {
		p := spool.Priorities[i%len(spool.Priorities)]
		want[enqueue(t, ctx, c, producer.Task{Type: "mix.go.who", Priority: &p})] = "go-worker"
		want[enqueue(t, ctx, c, producer.Task{Type: "mix.node.who", Priority: &p})] = "node-mix"
		late = append(late, enqueue(t, ctx, c, producer.Task{Type: "mix.late.who", Priority: &p}))
	}
	for id, worker := range want {
		res := wait(t, ctx, c, id, spool.StateCompleted, worker, 1)
		var out struct{ Worker, Type string }
		if raw, err := res.Output(); err != nil || json.Unmarshal(raw, &out) != nil || out.Worker != worker || out.Type != res.Type {
			t.Errorf("task %s (%s): output %s, %v", id, res.Type, raw, err)
		}
	}
	// The type nobody serves is still queued, untouched: no document.
	for _, id := range late {
		if res, err := c.Result(ctx, id); !errors.Is(err, producer.ErrTaskNotFound) {
			t.Fatalf("unserved task %s has a result: %+v, %v", id, res, err)
		}
	}
	if dead := deadLetters(t, ctx, e); dead != 0 {
		t.Errorf("%d dead letters, want none", dead)
	}

	startNodeWorker(t, e.URL, "node-late", "mix.late.>")
	for _, id := range late {
		wait(t, ctx, c, id, spool.StateCompleted, "node-late", 1)
	}
	settled(t, ctx, e, "spool.tasks.>")
	// Both partitions held tasks, so both were pulled.
	for _, name := range []string{"SPOOL_TASKS", "SPOOL_TASKS_1"} {
		info, err := e.Stream(t, name).Info(ctx)
		if err != nil || info.State.LastSeq == 0 {
			t.Errorf("partition %s stored no task: %+v, %v", name, info, err)
		}
	}
}

// deadLetters counts the messages in the dead-letter stream.
func deadLetters(t *testing.T, ctx context.Context, e *streamstest.Env) uint64 {
	t.Helper()
	info, err := e.Stream(t, "SPOOL_DLQ").Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Msgs
}
