package consumer_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/spoolq/spool/consumer"
	spool "github.com/spoolq/spool/shared"
	"github.com/spoolq/spool/streams"
	"github.com/spoolq/spool/streams/admin"
	"github.com/spoolq/spool/streams/streamstest"
)

// A paused priority delivers nothing to three workers while the other
// priorities run; the pause survives a re-provision; after resume every
// queued task runs on its first delivery.
func TestPauseAndResumePriority(t *testing.T) {
	t.Parallel()
	e := newEnv(t, streams.Settings{Consumers: streams.ConsumersByPriority})
	adm, err := admin.New(e.connect(), admin.WithLogger(testLogger(t)))
	if err != nil {
		t.Fatal(err)
	}
	ctx := testCtx(t)
	if _, err := adm.PausePriority(ctx, spool.Normal, time.Time{}); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	ran := map[string]int{}
	mux := consumer.NewMux()
	mux.HandleFunc("work", func(ctx context.Context, task *consumer.Task) ([]byte, error) {
		mu.Lock()
		ran[task.Priority.String()]++
		mu.Unlock()
		return nil, nil
	})
	for i := range 3 {
		e.worker(mux, consumer.WithWorkerName(fmt.Sprintf("w%d", i)), consumer.WithConcurrency(2, 2))
	}
	const backlog = 30
	for i := range backlog {
		e.publishID(spool.Normal, "work", fmt.Sprintf("n%d", i), nil, nil)
	}
	for i := range 5 {
		e.publishID(spool.High, "work", fmt.Sprintf("h%d", i), nil, nil)
	}
	// The other priority is not blocked.
	for i := range 5 {
		e.waitResult(fmt.Sprintf("h%d", i), spool.StateCompleted, 10*time.Second)
	}
	// A re-provision keeps the pause.
	if err := streams.Provision(ctx, e.js, e.topo, testLogger(t)); err != nil {
		t.Fatal(err)
	}
	st, err := adm.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if ps := st.Priorities[spool.Normal]; !ps.Paused || ps.PausedUntil == nil || !ps.PausedUntil.Equal(admin.Forever) || ps.Pending != backlog {
		t.Fatalf("normal while paused: %+v", ps)
	}
	if info := e.consumerInfo(spool.Normal); info.Delivered.Consumer != 0 || info.NumAckPending != 0 {
		t.Fatalf("paused priority delivered %d (ack pending %d)", info.Delivered.Consumer, info.NumAckPending)
	}
	mu.Lock()
	n := ran["normal"]
	mu.Unlock()
	if n != 0 {
		t.Fatalf("%d normal tasks ran while paused", n)
	}
	if err := adm.ResumePriority(ctx, spool.Normal); err != nil {
		t.Fatal(err)
	}
	for i := range backlog {
		doc := e.waitResult(fmt.Sprintf("n%d", i), spool.StateCompleted, 20*time.Second)
		if doc.Attempts != 1 {
			t.Errorf("task n%d completed on attempt %d: a delivery was counted while paused", i, doc.Attempts)
		}
	}
	streamstest.WaitFor(t, 5*time.Second, func() error {
		if info := e.consumerInfo(spool.Normal); info.NumRedelivered != 0 || info.Delivered.Consumer != backlog {
			return errors.New("every normal task delivered once")
		}
		return nil
	})
	if _, err := adm.PausePriority(ctx, spool.Priority(9), time.Time{}); !errors.Is(err, spool.ErrInvalidPriority) {
		t.Fatalf("pause of a bad priority: %v", err)
	}
	if _, err := adm.PausePriority(ctx, spool.Low, time.Now().Add(-time.Minute)); err == nil {
		t.Fatal("pause until a past time succeeded")
	}
}
