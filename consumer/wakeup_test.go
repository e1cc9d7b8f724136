package consumer_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/spoolq/spool/consumer"
	spool "github.com/spoolq/spool/shared"
	"github.com/spoolq/spool/streams"
	"github.com/spoolq/spool/streams/streamstest"
)

// manyTypes registers n exact types on a mux whose handler records the
// type and priority of each task it starts, in order.
func manyTypes(n int) (*consumer.Mux, func() []string, chan struct{}) {
	var mu sync.Mutex
	var ran []string
	hold := make(chan struct{})
	mux := consumer.NewMux()
	for i := range n {
		mux.HandleFunc(fmt.Sprintf("wake.t%02d", i), func(ctx context.Context, t *consumer.Task) ([]byte, error) {
			mu.Lock()
			ran = append(ran, t.Priority.String()+" "+t.Type)
			mu.Unlock()
			if t.Type == "wake.t00" {
				select {
				case <-hold:
				case <-ctx.Done():
				}
			}
			return nil, nil
		})
	}
	return mux, func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), ran...)
	}, hold
}

// settled waits until w has pulled each of its lanes once.
func settled(t *testing.T, w *consumer.Worker) {
	t.Helper()
	streamstest.WaitFor(t, 30*time.Second, func() error {
		if !consumer.Settled(w) {
			return fmt.Errorf("the worker has not pulled every lane once yet")
		}
		return nil
	})
}

// A worker serving more lanes than it has slots long-polls none of them
// beyond its slots: a task of a type and priority it does not long-poll is
// pulled at once through the wake-up of its lane, not at the next refresh
// (a minute here).
func TestWakeUpPullsAnIdleLane(t *testing.T) {
	e := byTypeEnv(t)
	mux, ran, _ := manyTypes(20)
	w := e.worker(mux, consumer.WithConcurrency(1, 2), consumer.WithPolling(time.Second, time.Minute))
	settled(t, w)
	start := time.Now()
	e.publishID(spool.Low, "wake.t17", "wake-low-17", nil, nil)
	streamstest.WaitFor(t, 10*time.Second, func() error {
		if got := ran(); len(got) != 1 || got[0] != "low wake.t17" {
			return fmt.Errorf("ran %q, want the low wake.t17 task", got)
		}
		return nil
	})
	t.Logf("picked up after %s", time.Since(start).Round(time.Microsecond))
}

// Lanes woken while every slot is busy are pulled by priority when a slot
// frees, whatever order their tasks were published in.
func TestWakeUpKeepsPriorities(t *testing.T) {
	e := byTypeEnv(t)
	mux, ran, hold := manyTypes(20)
	w := e.worker(mux, consumer.WithConcurrency(1, 1), consumer.WithStrict(true), consumer.WithPolling(time.Second, time.Minute))
	var release sync.Once
	t.Cleanup(func() { release.Do(func() { close(hold) }) })
	settled(t, w)
	e.publishID(spool.Normal, "wake.t00", "wake-hold", nil, nil)
	streamstest.WaitFor(t, 30*time.Second, func() error {
		if got := ran(); len(got) != 1 {
			return fmt.Errorf("ran %q, want the task holding the slot", got)
		}
		return nil
	})
	e.publishID(spool.Idle, "wake.t11", "wake-idle-11", nil, nil)
	e.publishID(spool.Critical, "wake.t12", "wake-critical-12", nil, nil)
	streamstest.WaitFor(t, 10*time.Second, func() error {
		if n := consumer.Woken(w); n != 2 {
			return fmt.Errorf("%d lanes woken, want 2", n)
		}
		return nil
	})
	release.Do(func() { close(hold) })
	streamstest.WaitFor(t, 10*time.Second, func() error {
		if got := ran(); len(got) != 3 {
			return fmt.Errorf("ran %q, want 3 tasks", got)
		}
		return nil
	})
	if got := ran(); got[1] != "critical wake.t12" || got[2] != "idle wake.t11" {
		t.Errorf("ran %q: want the critical task before the idle one", got)
	}
}

// On task partitions, a lane is watched on the subjects its partition
// hears: a task published to the plain subject, which the server maps to
// a partition, wakes the lane that pulls it there.
func TestWakeUpAcrossPartitions(t *testing.T) {
	e := newPartitionedEnv(t, 3, streams.Settings{Consumers: streams.ConsumersByType})
	mux, ran, _ := manyTypes(5)
	w := e.worker(mux, consumer.WithConcurrency(1, 2), consumer.WithPolling(time.Second, time.Minute))
	settled(t, w)
	var want []string
	for i, p := range []spool.Priority{spool.Idle, spool.Low, spool.High, spool.Normal} {
		typ := fmt.Sprintf("wake.t%02d", i+1)
		e.publishID(p, typ, fmt.Sprintf("wake-part-%d", i), nil, nil)
		want = append(want, p.String()+" "+typ)
		streamstest.WaitFor(t, 10*time.Second, func() error {
			if got := ran(); !slices.Equal(got, want) {
				return fmt.Errorf("ran %q, want %q", got, want)
			}
			return nil
		})
	}
}
