package consumer_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/spoolq/spool/consumer"
	spool "github.com/spoolq/spool/shared"
	"github.com/spoolq/spool/streams"
	"github.com/spoolq/spool/streams/streamstest"
)

// TestCompletionsKeepTheirTaskThroughAStall holds the result writes up for
// longer than the AckWait (the results bucket's subjects are moved away,
// so a write finds no stream, as in an election) while a worker runs fast
// tasks: the completions fill the result pipeline, the attempts after
// them wait for room, and pulled tasks wait for a slot. Each of them is
// heartbeated from its last heartbeat wherever it waits, so the server
// redelivers none: every task runs once, and no redelivery is acked as
// stored already.
func TestCompletionsKeepTheirTaskThroughAStall(t *testing.T) {
	t.Parallel()
	const ackWait = 3 * time.Second
	e := newEnv(t, streams.Settings{AckWait: ackWait})
	ctx := testCtx(t)
	bucket, err := e.js.Stream(ctx, "KV_"+e.names.ResultsBucket())
	if err != nil {
		t.Fatal(err)
	}
	cfg := bucket.CachedInfo().Config
	stalled := cfg
	stalled.Subjects = []string{"stalled." + e.names.ResultsBucket() + ".>"}
	if _, err := e.js.UpdateStream(ctx, stalled); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	runs := map[string]int{}
	mux := consumer.NewMux()
	mux.HandleFunc("job", func(_ context.Context, task *consumer.Task) ([]byte, error) {
		mu.Lock()
		runs[task.ID]++
		mu.Unlock()
		return nil, nil
	})
	const slots = 2
	w := e.worker(mux, consumer.WithConcurrency(slots, slots), consumer.WithPolling(100*time.Millisecond, 100*time.Millisecond),
		consumer.WithIOTimeout(5*ackWait)) // the writes' retry budget outlasts the stall
	const n = 200
	e.publishMany(spool.Normal, "job", n, nil)
	// The pipeline holds 64 completions; the slots' next attempts wait
	// for room.
	ran := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(runs)
	}
	streamstest.WaitFor(t, 30*time.Second, func() error {
		if got := ran(); got < 64+slots {
			return fmt.Errorf("%d tasks ran, waiting for the pipeline to fill", got)
		}
		return nil
	})
	// The stall outlasts the AckWait twice over.
	<-time.After(2 * ackWait)
	if _, err := e.js.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	streamstest.WaitFor(t, time.Minute, func() error {
		if left := e.taskMsgs(); left > 0 {
			return fmt.Errorf("%d tasks left", left)
		}
		return nil
	})
	mu.Lock()
	defer mu.Unlock()
	if len(runs) != n {
		t.Errorf("%d of %d tasks ran", len(runs), n)
	}
	for id, k := range runs {
		if k > 1 {
			t.Errorf("task %s ran %d times", id, k)
		}
	}
	if got := w.Stats().Total().AckedStored; got > 0 {
		t.Errorf("%d tasks were delivered again while the worker held them (acked as stored on their redelivery)", got)
	}
	if info := e.consumerInfo(spool.Normal); info.NumRedelivered > 0 {
		t.Errorf("the consumer counts %d redelivered tasks", info.NumRedelivered)
	}
}
