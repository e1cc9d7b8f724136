package consumer_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

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
	e := newEnv(t, streams.Settings{Consumers: streams.ConsumersByPriority, AckWait: ackWait})
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

// TestOverdueTaskSurvivesConsumerLeaderChange takes a task that waited in
// the stream for longer than the AckWait (a backlog) and moves its
// consumer's leader while the handler runs, before its first periodic
// heartbeat. The consumer's replicas record the delivery at the time the
// task was stored, so the new leader finds it overdue at once; the
// heartbeat the worker sends as such a task arrives records the time of
// its delivery instead: the task is not delivered again and runs once.
func TestOverdueTaskSurvivesConsumerLeaderChange(t *testing.T) {
	t.Parallel()
	// Long enough that the attempt's first periodic heartbeat (AckWait/3)
	// comes after the new leader's first look at its pending tasks (0.5
	// to 1.5s after it takes over).
	const ackWait = 9 * time.Second
	e := newClusterEnv(t, streams.Settings{Consumers: streams.ConsumersByPriority, AckWait: ackWait})
	e.publishID(spool.Normal, "slow", "overdue", nil, nil)
	// The task waits in the stream for longer than the AckWait.
	<-time.After(ackWait + time.Second)
	started := make(chan int32, 2)
	release := make(chan struct{})
	var releaseOnce sync.Once
	free := func() { releaseOnce.Do(func() { close(release) }) }
	var runs atomic.Int32
	mux := consumer.NewMux()
	mux.HandleFunc("slow", func(ctx context.Context, task *consumer.Task) ([]byte, error) {
		started <- runs.Add(1)
		select {
		case <-release:
		case <-ctx.Done():
		}
		return nil, nil
	})
	// Spare slots long-poll every priority: a redelivery is taken at once.
	e.worker(mux, consumer.WithConcurrency(8, 8))
	t.Cleanup(free) // runs before the worker's stop, which waits for the handler
	select {
	case <-started:
	case <-time.After(30 * time.Second):
		t.Fatal("the task did not start")
	}
	cons := e.consumerInfo(spool.Normal)
	old := cons.Cluster.Leader
	if _, err := e.nc.RequestWithContext(testCtx(t), "$JS.API.CONSUMER.LEADER.STEPDOWN."+cons.Stream+"."+cons.Name, nil); err != nil {
		t.Fatal(err)
	}
	streamstest.WaitFor(t, 10*time.Second, func() error {
		ctx, cancel := context.WithTimeout(testCtx(t), time.Second)
		defer cancel()
		c, err := e.js.Consumer(ctx, cons.Stream, cons.Name)
		if err != nil {
			return err
		}
		if l := c.CachedInfo().Cluster.Leader; l == "" || l == old {
			return fmt.Errorf("consumer leader %q", l)
		}
		return nil
	})
	// The new leader redelivers an overdue task within 1.5s of taking
	// over; the attempt heartbeats every AckWait/3 meanwhile.
	select {
	case n := <-started:
		t.Errorf("the task was delivered again after the consumer's leader changed and ran %d times", n)
	case <-time.After(ackWait / 2):
	}
	free()
	e.waitResult("overdue", spool.StateCompleted, 30*time.Second)
	if n := runs.Load(); n != 1 {
		t.Errorf("the task ran %d times", n)
	}
}

// TestRedeliveryWaitsForTheEarlierAttempt redelivers a task whose first
// delivery is still held (here by the test, which took it with a plain
// fetch and never heartbeats it, as a worker whose heartbeat a new
// consumer leader never saw): the redelivery finds no stored outcome and
// gives the earlier attempt a moment to store one. The test stores the
// completed result shortly after the redelivery arrived, as that worker
// would: the handler never runs and the redelivery is acked as stored.
// Only a replicated stream has consumer leaders to change, so only there
// does a redelivery wait: the test runs on a 3-node cluster.
func TestRedeliveryWaitsForTheEarlierAttempt(t *testing.T) {
	t.Parallel()
	const ackWait = 4 * time.Second // the redelivery waits up to 1s
	e := newClusterEnv(t, streams.Settings{Consumers: streams.ConsumersByPriority, AckWait: ackWait})
	ctx := testCtx(t)
	e.publishID(spool.Normal, "job", "held", nil, nil)
	first := e.fetchOne(spool.Normal)
	md, err := first.Metadata()
	if err != nil {
		t.Fatal(err)
	}
	// The worker heartbeats the redelivery as it arrives (it waited in the
	// stream longer than a quarter of the AckWait): the test's cue that
	// the redelivery reached the worker.
	arrived := make(chan struct{}, 1)
	sub, err := e.nc.Subscribe("$JS.ACK."+e.names.TaskStream()+"."+e.names.Consumer(spool.Normal)+".>", func(m *nats.Msg) {
		if string(m.Data) == "+WPI" {
			select {
			case arrived <- struct{}{}:
			default:
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	var runs atomic.Int32
	mux := consumer.NewMux()
	mux.HandleFunc("job", func(context.Context, *consumer.Task) ([]byte, error) {
		runs.Add(1)
		return nil, nil
	})
	w := e.worker(mux, consumer.WithConcurrency(8, 8))
	select {
	case <-arrived:
	case <-time.After(30 * time.Second):
		t.Fatal("the task was not delivered again")
	}
	// The earlier attempt stores its outcome a little after the
	// redelivery arrived, then acks its delivery.
	<-time.After(ackWait / 16)
	kv, err := e.js.KeyValue(ctx, e.names.ResultsBucket())
	if err != nil {
		t.Fatal(err)
	}
	fin := time.Now()
	doc, err := json.Marshal(spool.Result{ID: "held", Type: "job", Priority: spool.Normal, State: spool.StateCompleted,
		Attempts: 1, EnqueuedAt: md.Timestamp, FinishedAt: &fin})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Create(ctx, "held", doc); err != nil {
		t.Fatalf("the redelivery did not wait (the handler ran %d times) and stored its result first: %v", runs.Load(), err)
	}
	if err := first.Ack(); err != nil {
		t.Fatal(err)
	}
	streamstest.WaitFor(t, 10*time.Second, func() error {
		if n := w.Stats().Total().AckedStored; n != 1 {
			return fmt.Errorf("%d redeliveries acked as stored", n)
		}
		return nil
	})
	if n := runs.Load(); n != 0 {
		t.Errorf("the handler ran %d times while the earlier attempt stored the outcome", n)
	}
}
