package control_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/spoolq/spool/consumer"
	"github.com/spoolq/spool/producer"
	spool "github.com/spoolq/spool/shared"
	"github.com/spoolq/spool/streams/admin"
	"github.com/spoolq/spool/streams/streamstest"
)

// parked returns how many tasks of typ are parked, and whether typ is
// paused, as admin.Types reports them.
func parked(ctx context.Context, adm *admin.Client, typ string) (uint64, bool, error) {
	types, err := adm.Types(ctx)
	if err != nil {
		return 0, false, err
	}
	for _, ts := range types {
		if ts.Type == typ {
			return ts.Parked, ts.Paused, nil
		}
	}
	return 0, false, nil
}

// A paused task type runs nowhere while three workers drain a backlog of
// it beside a type that keeps completing; its tasks are parked without a
// delivery counted; the pause survives a worker restart and a server
// restart; after the resume every task runs once, on attempt 1.
func TestPauseTaskType(t *testing.T) {
	t.Parallel()
	env, restart := restartable(t)
	ctx := streamstest.Context(t)
	adm, err := admin.New(env.Connect(t), admin.WithLogger(streamstest.Logger(t)))
	if err != nil {
		t.Fatal(err)
	}
	client, err := producer.New(env.Connect(t), producer.WithLogger(streamstest.Logger(t)))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := adm.PauseType(ctx, "report", admin.TypePauseOptions{By: "ops", Reason: "database maintenance"}); err != nil {
		t.Fatal(err)
	}
	var paused atomic.Bool
	paused.Store(true)
	var mu sync.Mutex
	ran := map[string]int{}
	mux := consumer.NewMux()
	handle := func(ctx context.Context, task *consumer.Task) ([]byte, error) {
		if task.Type == "report" && paused.Load() {
			t.Errorf("task %s of the paused type ran", task.ID)
		}
		if task.Attempt != 1 {
			t.Errorf("task %s ran on attempt %d", task.ID, task.Attempt)
		}
		mu.Lock()
		ran[task.ID]++
		mu.Unlock()
		return nil, nil
	}
	mux.HandleFunc("report", handle)
	mux.HandleFunc("email", handle)
	s := &stack{env: env}
	var workers []*consumer.Worker
	for range 3 {
		workers = append(workers, s.worker(t, mux))
	}
	var reports []string
	enqueue := func(typ string, n int) []string {
		var ids []string
		for i := range n {
			p := spool.Priorities[i%2+1] // high and normal
			res, err := client.Enqueue(ctx, producer.Task{Type: typ, Priority: &p, Payload: []byte(typ)})
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, res.ID)
		}
		return ids
	}
	waitParked := func(n uint64) {
		t.Helper()
		streamstest.WaitFor(t, 20*time.Second, func() error {
			got, isPaused, err := parked(ctx, adm, "report")
			if err != nil {
				return err
			}
			if got != n || !isPaused {
				return fmt.Errorf("report: %d parked (paused %v), want %d", got, isPaused, n)
			}
			return nil
		})
	}
	reports = append(reports, enqueue("report", 30)...)
	emails := enqueue("email", 20)
	for _, id := range emails {
		waitCompleted(t, client, id)
	}
	waitParked(30)

	// A restarted worker still sees the pause.
	if err := workers[0].Stop(ctx); err != nil {
		t.Fatal(err)
	}
	workers[0] = s.worker(t, mux)
	reports = append(reports, enqueue("report", 5)...)
	waitParked(35)

	// So does every worker after a server restart.
	restart()
	reports = append(reports, enqueue("report", 5)...)
	emails = append(emails, enqueue("email", 5)...)
	for _, id := range emails {
		waitCompleted(t, client, id)
	}
	waitParked(40)
	mu.Lock()
	for _, id := range reports {
		if ran[id] != 0 {
			t.Errorf("report %s ran while its type was paused", id)
		}
	}
	mu.Unlock()

	paused.Store(false)
	if err := adm.ResumeType(ctx, "report"); err != nil {
		t.Fatal(err)
	}
	for _, id := range reports {
		doc := waitCompleted(t, client, id)
		if doc.Attempts != 1 {
			t.Errorf("report %s completed on attempt %d: a delivery was counted while paused", id, doc.Attempts)
		}
	}
	streamstest.WaitFor(t, 10*time.Second, func() error {
		n, _, err := parked(ctx, adm, "report")
		if err != nil || n != 0 {
			return fmt.Errorf("%d reports still parked (%v)", n, err)
		}
		return nil
	})
	for _, w := range workers { // before the restarted server's cleanup
		if err := w.Stop(ctx); err != nil {
			t.Errorf("stopping a worker: %v", err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	for _, id := range append(reports, emails...) {
		if ran[id] != 1 {
			t.Errorf("task %s ran %d times", id, ran[id])
		}
	}
	if _, err := adm.PauseType(ctx, "bad type", admin.TypePauseOptions{}); !errors.Is(err, spool.ErrInvalidType) {
		t.Errorf("pausing a malformed type: %v", err)
	}
	if _, err := adm.PauseType(ctx, "report", admin.TypePauseOptions{Until: time.Now().Add(-time.Minute)}); err == nil {
		t.Error("pausing until a past time succeeded")
	}
}

// waitCompleted waits for task id's completed result.
func waitCompleted(t *testing.T, client *producer.Client, id string) spool.Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	doc, err := client.Wait(ctx, id)
	if err != nil {
		t.Fatalf("waiting for task %s: %v", id, err)
	}
	if doc.State != spool.StateCompleted {
		t.Fatalf("task %s ended %s", id, doc.State)
	}
	return doc
}
