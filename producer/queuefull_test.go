package producer_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/spoolq/spool/producer"
	"github.com/spoolq/spool/streams"
	"github.com/spoolq/spool/streams/embedded"
)

func TestQueueFullRefusesAndKeepsQueuedTasks(t *testing.T) {
	t.Parallel()
	e := newEnv(t, embedded.Options{MaxStore: 256 << 10}, streams.Settings{})
	ctx := ctxFor(t)
	payload := make([]byte, 8<<10)
	var stored int
	var err error
	for i := range 1000 {
		_, err = e.client.Enqueue(ctx, producer.NewTask("fill", payload), producer.TaskID(fmt.Sprintf("fill-%d", i)))
		if err != nil {
			break
		}
		stored++
	}
	if !errors.Is(err, producer.ErrQueueFull) {
		t.Fatalf("after %d tasks: want ErrQueueFull, got %v", stored, err)
	}
	if stored == 0 {
		t.Fatal("nothing stored before the queue filled")
	}
	t.Logf("queue full after %d tasks: %v", stored, err)
	if got := e.streamMsgs(t); got != uint64(stored) {
		t.Fatalf("stream holds %d tasks, %d were acknowledged", got, stored)
	}
	// A batch reports every refused task as failed, none as enqueued.
	tasks := make([]producer.Task, 20)
	for i := range tasks {
		tasks[i] = producer.NewTask("fill", payload)
	}
	results, err := e.client.EnqueueBatch(ctx, tasks)
	if !errors.Is(err, producer.ErrQueueFull) {
		t.Fatalf("batch: want ErrQueueFull, got %v", err)
	}
	for i, r := range results {
		if !errors.Is(r.Err, producer.ErrQueueFull) {
			t.Fatalf("batch task %d: %+v", i, r)
		}
	}
	if got := e.streamMsgs(t); got != uint64(stored) {
		t.Fatalf("stream holds %d tasks after the batch, want %d", got, stored)
	}
}
