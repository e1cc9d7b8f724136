package consumer_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/spoolq/spool/consumer"
	spool "github.com/spoolq/spool/shared"
	"github.com/spoolq/spool/streams"
	"github.com/spoolq/spool/streams/embedded"
	"github.com/spoolq/spool/streams/streamstest"
)

// TestFinalWriteWaitsForAReplicatingWrite: a replicated stream's leader
// refuses a write conditional on a key's revision while an earlier write
// to that key is still being replicated, and reads show the key as it was
// until then. On a loaded cluster that window is long enough for a
// handler's progress or processing write to make its outcome's write
// lose every try. The worker must wait for the earlier write, store the
// outcome and ack the task, not give the result up and run the task
// again. The window is held open here by stopping the results stream's
// two followers while another write of the task's key is in flight.
func TestFinalWriteWaitsForAReplicatingWrite(t *testing.T) {
	t.Parallel()
	c, err := embedded.StartCluster(3, embedded.Options{StoreDir: t.TempDir(), Name: "consumer"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Shutdown)
	e := provisionEnv(t, c.ClientURLs(), streams.Settings{Consumers: streams.ConsumersByPriority, Replicas: 3, AckWait: 30 * time.Second})
	ctx := testCtx(t)
	results, err := e.js.Stream(ctx, "KV_"+e.names.ResultsBucket())
	if err != nil {
		t.Fatal(err)
	}
	info, err := results.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	leader := -1
	for i, s := range c.Servers() {
		if s.Name() == info.Cluster.Leader {
			leader = i
		}
	}
	if leader < 0 {
		t.Fatalf("no node leads the results stream (leader %q)", info.Cluster.Leader)
	}
	// The worker and the test talk to the leader's node only: the others
	// are stopped while the handler runs.
	leaderURL := c.Servers()[leader].ClientURL()
	connect := func() *nats.Conn {
		nc, err := nats.Connect(leaderURL, nats.MaxReconnects(-1))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		return nc
	}
	var runs atomic.Int32
	started, release := make(chan struct{}), make(chan struct{})
	mux := consumer.NewMux()
	mux.HandleFunc("job", func(context.Context, *consumer.Task) ([]byte, error) {
		if runs.Add(1) == 1 {
			close(started)
			<-release
		}
		return []byte(`"done"`), nil
	})
	w, err := consumer.New(connect(), mux, consumer.WithLogger(testLogger(t)), consumer.WithWorkerName("test-worker"),
		consumer.WithPolling(100*time.Millisecond, 50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Stop(context.Background()) })
	e.publishID(spool.Normal, "job", "x", nil, nil)
	select {
	case <-started:
	case <-time.After(30 * time.Second):
		t.Fatal("the task did not start")
	}

	for i := range c.Servers() {
		if i != leader {
			c.Stop(i)
		}
	}
	nc := connect()
	writes, err := nc.SubscribeSync(e.names.ResultSubject("x"))
	if err != nil {
		t.Fatal(err)
	}
	// Another writer's write of the key, which the leader takes but cannot
	// replicate: it stays in flight until the followers are back.
	if err := nc.Publish(e.names.ResultSubject("x"), []byte(`{"id":"x","state":"pending"}`)); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	close(release)
	// The worker's outcome write reaches the leader (after ours), and is
	// refused while ours is in flight.
	for n := 0; n < 2; n++ {
		if _, err := writes.NextMsg(30 * time.Second); err != nil {
			t.Fatalf("write %d of the task's key not seen: %v", n+1, err)
		}
	}
	for i := range c.Servers() {
		if i != leader {
			if err := c.Restart(i); err != nil {
				t.Fatal(err)
			}
		}
	}
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	streamstest.WaitFor(t, time.Minute, func() error {
		kv, err := js.KeyValue(ctx, e.names.ResultsBucket())
		if err != nil {
			return err
		}
		entry, err := kv.Get(ctx, "x")
		if err != nil {
			return err
		}
		var doc spool.Result
		if err := json.Unmarshal(entry.Value(), &doc); err != nil {
			return err
		}
		if doc.State != spool.StateCompleted {
			return fmt.Errorf("state %q", doc.State)
		}
		return nil
	})
	if n := runs.Load(); n != 1 {
		t.Errorf("the task ran %d times, want once: its outcome was given up while another write was being replicated", n)
	}
}
