package consumer_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/spoolq/spool/consumer"
	spool "github.com/spoolq/spool/shared"
	"github.com/spoolq/spool/streams"
	"github.com/spoolq/spool/streams/streamstest"
)

// Strict mode serves every critical task before any high one, and so on.
func TestStrictPriorityOrder(t *testing.T) {
	t.Parallel()
	e := newEnv(t, streams.Settings{})
	const perPriority = 15
	for _, p := range []spool.Priority{spool.Idle, spool.Low, spool.Normal, spool.High, spool.Critical} {
		e.publishMany(p, "work", perPriority, nil)
	}
	var order log[spool.Priority]
	mux := consumer.NewMux()
	mux.HandleFunc("work", func(ctx context.Context, task *consumer.Task) ([]byte, error) {
		order.add(task.Priority)
		return nil, nil
	})
	e.worker(mux, consumer.WithStrict(true), consumer.WithConcurrency(1, 1))
	streamstest.WaitFor(t, 30*time.Second, func() error {
		if order.len() != 5*perPriority {
			return errors.New("all tasks")
		}
		return nil
	})
	got := order.snapshot()
	for i := 1; i < len(got); i++ {
		if got[i] < got[i-1] {
			t.Fatalf("task %d is %s after %s: order %v", i, got[i], got[i-1], got)
		}
	}
}

// Under saturation every priority's share of the tasks started matches its
// weight share within 2 percentage points.
func TestWeightedShares(t *testing.T) {
	t.Parallel()
	e := newEnv(t, streams.Settings{})
	const perPriority = 400
	const window = 480 // all priorities stay non-empty: critical needs 200 of its 400
	for _, p := range spool.Priorities {
		e.publishMany(p, "work", perPriority, nil)
	}
	var order log[spool.Priority]
	mux := consumer.NewMux()
	mux.HandleFunc("work", func(ctx context.Context, task *consumer.Task) ([]byte, error) {
		order.add(task.Priority)
		return nil, nil
	})
	e.worker(mux, consumer.WithConcurrency(4, 4), consumer.WithBoost())
	streamstest.WaitFor(t, 30*time.Second, func() error {
		if order.len() < window {
			return errors.New("window")
		}
		return nil
	})
	wantShares(t, order.snapshot()[:window], 0.02)
}

// wantShares checks that every priority's share of the tasks started in
// order is its share of the default weights within tol.
func wantShares(t *testing.T, order []spool.Priority, tol float64) {
	t.Helper()
	var counts [5]int
	for _, p := range order {
		counts[p]++
	}
	weights := consumer.DefaultWeights() // the tests leave the weights alone
	var sum float64
	for _, v := range weights {
		sum += v
	}
	for _, p := range spool.Priorities {
		share := float64(counts[p]) / float64(len(order))
		want := weights[p] / sum
		t.Logf("%-8s share %.3f want %.3f", p, share, want)
		if d := share - want; d > tol || d < -tol {
			t.Errorf("%s share %.3f, want %.3f ± %.2f", p, share, want, tol)
		}
	}
}

// The boost lets an old idle task through a flood of critical tasks: with
// idle weighted 1/10000 of critical it would wait for ~10000 critical
// tasks; aged past the boost step (×10000) it runs within a few.
func TestBoostLetsIdleThrough(t *testing.T) {
	t.Parallel()
	e := newEnv(t, streams.Settings{})
	idleSeq := e.publish(spool.Idle, "flood", nil, nil)
	e.publishMany(spool.Critical, "flood", 300, nil)
	tasks, err := e.js.Stream(testCtx(t), e.names.TaskStream())
	if err != nil {
		t.Fatal(err)
	}
	idleMsg, err := tasks.GetMsg(testCtx(t), idleSeq)
	if err != nil {
		t.Fatal(err)
	}
	// A frozen clock at which the idle task is exactly one minute old and
	// every critical task (published after it) is younger.
	frozen := idleMsg.Time.Add(time.Minute)
	clock := func() time.Time { return frozen }

	gate := make(chan struct{})
	var first atomic.Bool
	var order log[spool.Priority]
	mux := consumer.NewMux()
	mux.HandleFunc("flood", func(ctx context.Context, task *consumer.Task) ([]byte, error) {
		if first.CompareAndSwap(false, true) {
			<-gate // hold the only slot while the idle task ages
		}
		order.add(task.Priority)
		return nil, nil
	})
	weights := consumer.DefaultWeights()
	weights[spool.Idle] = 0.0001
	w := e.worker(mux, consumer.WithConcurrency(1, 1), consumer.WithWeights(weights),
		consumer.WithBoost(consumer.BoostStep{After: time.Minute, Factor: 10000}), consumer.WithClock(clock))

	streamstest.WaitFor(t, 10*time.Second, func() error {
		if w.Stats().Busy != 1 {
			return errors.New("first task running")
		}
		return nil
	})
	streamstest.WaitFor(t, 10*time.Second, func() error {
		s := w.Stats()
		if !(s.Priorities[spool.Idle].Boost == 10000 && s.Priorities[spool.Critical].Boost == 1 && s.Priorities[spool.Critical].Backlog > 0) {
			return errors.New("idle boost seen")
		}
		return nil
	})
	close(gate)
	streamstest.WaitFor(t, 30*time.Second, func() error {
		for _, p := range order.snapshot() {
			if p == spool.Idle {
				return nil
			}
		}
		return errors.New("idle task done")
	})
	wantBoosted(t, order.snapshot())
}

// wantBoosted checks that the idle task in order ran after at most 3
// critical tasks.
func wantBoosted(t *testing.T, order []spool.Priority) {
	t.Helper()
	before := 0
	for _, p := range order {
		if p == spool.Idle {
			break
		}
		before++
	}
	t.Logf("idle task ran after %d critical tasks", before)
	if before > 3 {
		t.Errorf("idle task ran after %d critical tasks, want at most 3 once boosted", before)
	}
}
