package consumer_test

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/spoolq/spool/consumer"
	spool "github.com/spoolq/spool/shared"
	"github.com/spoolq/spool/shared/limits"
	"github.com/spoolq/spool/streams"
	"github.com/spoolq/spool/streams/streamstest"
)

// paceRecorder records the handler starts of a rate-limited type.
type paceRecorder struct {
	mu     sync.Mutex
	starts []time.Time
}

func (r *paceRecorder) handle(context.Context, *consumer.Task) ([]byte, error) {
	r.mu.Lock()
	r.starts = append(r.starts, time.Now())
	r.mu.Unlock()
	return nil, nil
}

// mostIn is the most starts within any window of d.
func (r *paceRecorder) mostIn(d time.Duration) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := append([]time.Time(nil), r.starts...)
	sort.Slice(s, func(i, j int) bool { return s[i].Before(s[j]) })
	most := 0
	for i := range s {
		j := sort.Search(len(s), func(j int) bool { return !s[j].Before(s[i].Add(d)) })
		most = max(most, j-i)
	}
	return most
}

// handBacks sums the tasks a worker turned away by flow control.
func handBacks(w *consumer.Worker, typ string) uint64 {
	var n uint64
	for _, c := range w.Stats().Flow[typ].Denied {
		n += c
	}
	return n
}

// queuePaced queues n tasks of type paced, limited to limit starts a
// second, and returns a mux whose handler records their starts.
func queuePaced(t *testing.T, s streams.Settings, limit, n int) (*env, *consumer.Mux, *paceRecorder) {
	t.Helper()
	e := newEnv(t, s)
	e.putRule(limits.Rule{Type: "paced", Rate: &limits.Rate{Limit: limit, Period: limits.Duration(time.Second)}})
	for i := range n {
		e.publishID(spool.Normal, "paced", fmt.Sprintf("paced-%d", i), nil, nil)
	}
	rec := &paceRecorder{}
	mux := consumer.NewMux()
	mux.HandleFunc("paced", rec.handle)
	return e, mux, rec
}

// runPaced queues n tasks of type paced, limited to limit starts a
// second, starts a worker of slots slots that records their starts, and
// waits until each task completed on its first attempt.
func runPaced(t *testing.T, s streams.Settings, limit, slots, n int) (*env, *consumer.Worker, *paceRecorder) {
	t.Helper()
	e, mux, rec := queuePaced(t, s, limit, n)
	w := e.worker(mux, consumer.WithConcurrency(slots, slots))
	for i := range n {
		if doc := e.waitResult(fmt.Sprintf("paced-%d", i), spool.StateCompleted, time.Minute); doc.Attempts != 1 {
			t.Errorf("task paced-%d took %d attempts", i, doc.Attempts)
		}
	}
	return e, w, rec
}

// A worker that pulls a rate-limited type through a consumer of its own
// holds the type's tasks for their starts and stops pulling the type
// while its line is full: a backlog of five times the worker's slots runs
// at the rate with no task handed back, each on its first attempt, and no
// second holds more starts than the rate (+1 for the jitter between a
// start and its handler).
func TestRateHeldWithoutHandBacks(t *testing.T) {
	t.Parallel()
	const limit, slots, n = 40, 20, 100
	_, w, rec := runPaced(t, streams.Settings{Consumers: streams.ConsumersByType}, limit, slots, n)
	if hb := handBacks(w, "paced"); hb != 0 {
		t.Errorf("%d of %d tasks handed back, want none", hb, n)
	}
	if most := rec.mostIn(time.Second); most > limit+1 {
		t.Errorf("%d starts within one second, limit %d", most, limit)
	}
}

// deliveries sums the deliveries of every consumer of the task stream.
func deliveries(t *testing.T, e *env) uint64 {
	t.Helper()
	stream, err := e.js.Stream(testCtx(t), e.names.TaskStream())
	if err != nil {
		t.Fatal(err)
	}
	var n uint64
	for ci := range stream.ListConsumers(testCtx(t)).Info() {
		n += ci.Delivered.Consumer
	}
	return n
}

// A task held for its start longer than the AckWait is heartbeated
// meanwhile: a rate of 2 a second with a line of four tasks in one worker
// holds the last for about two AckWaits of one second, and every task
// is delivered once and runs once, with none handed back.
func TestRateHeldPastAckWait(t *testing.T) {
	t.Parallel()
	const limit, n = 2, 6
	e, w, rec := runPaced(t, streams.Settings{Consumers: streams.ConsumersByType, AckWait: time.Second}, limit, 8, n)
	if hb := handBacks(w, "paced"); hb != 0 {
		t.Errorf("%d of %d tasks handed back, want none", hb, n)
	}
	if d := deliveries(t, e); d != n {
		t.Errorf("%d deliveries of %d tasks, want one each: a held task was delivered again", d, n)
	}
	rec.mu.Lock()
	runs := len(rec.starts)
	rec.mu.Unlock()
	if runs != n {
		t.Errorf("%d runs of %d tasks, want each once", runs, n)
	}
	if most := rec.mostIn(time.Second); most > limit+1 {
		t.Errorf("%d starts within one second, limit %d", most, limit)
	}
}

// Two workers share a rate whose tasks wait in their rate lines; one is
// killed (its connection closed) while it holds tasks. No second holds
// more starts than the rate (+1 for the jitter between a start and its
// handler), and every task completes: the killed worker's held tasks come
// back after the AckWait and run on the other.
func TestRateHeldWorkerKilled(t *testing.T) {
	t.Parallel()
	const limit, n = 20, 60
	e, mux, rec := queuePaced(t, streams.Settings{Consumers: streams.ConsumersByType, AckWait: time.Second}, limit, n)
	nc := e.connect()
	victim, err := consumer.New(nc, mux, consumer.WithLogger(testLogger(t)), consumer.WithWorkerName("victim"),
		consumer.WithConcurrency(10, 10), consumer.WithPolling(100*time.Millisecond, 50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	if err := victim.Start(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	e.worker(mux, consumer.WithConcurrency(10, 10))
	streamstest.WaitFor(t, 30*time.Second, func() error {
		if w := victim.Stats().Flow["paced"].Waiting; w < 2 {
			return fmt.Errorf("%d tasks wait in the victim's rate line", w)
		}
		return nil
	})
	// The kill: nothing more leaves the victim.
	nc.Close()
	if err := victim.Stop(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		e.waitResult(fmt.Sprintf("paced-%d", i), spool.StateCompleted, time.Minute)
	}
	if most := rec.mostIn(time.Second); most > limit+1 {
		t.Errorf("%d starts within one second, limit %d", most, limit)
	}
}

// A task that kills its worker on every attempt, of a rate whose next
// start is further off than a redelivery waits (one start every five
// seconds, AckWait one second), is handed back on each redelivery with a
// fresh count of deliveries, so the server's max deliver never stops it:
// the attempts it carries must. With max deliver 2 and retries to spare
// it runs twice, each time in a new worker killed as it runs, and then
// lands in the dead-letter stream with reason max_deliver.
func TestRateHeldCrashingTaskDeadLetters(t *testing.T) {
	t.Parallel()
	e := newEnv(t, streams.Settings{Consumers: streams.ConsumersByType, AckWait: time.Second, MaxDeliver: 2})
	e.putRule(limits.Rule{Type: "crashy", Rate: &limits.Rate{Limit: 1, Period: limits.Duration(5 * time.Second)}})
	e.publishID(spool.Normal, "crashy", "crashy-1", nil, map[string]string{spool.HeaderMaxRetries: "5"})
	const maxRuns = 2
	runs := 0
	for {
		nc := e.connect()
		crashed := make(chan struct{})
		mux := consumer.NewMux()
		mux.HandleFunc("crashy", func(context.Context, *consumer.Task) ([]byte, error) {
			// The kill: nothing more leaves this worker.
			nc.Close()
			close(crashed)
			return nil, nil
		})
		w, err := consumer.New(nc, mux, consumer.WithLogger(testLogger(t)), consumer.WithWorkerName(fmt.Sprintf("victim-%d", runs)),
			consumer.WithConcurrency(4, 4), consumer.WithPolling(100*time.Millisecond, 50*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		if err := w.Start(testCtx(t)); err != nil {
			t.Fatal(err)
		}
		stopped := false
		t.Cleanup(func() {
			if !stopped {
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				_ = w.Stop(ctx)
			}
		})
		var doc spool.Result
		streamstest.WaitFor(t, 30*time.Second, func() error {
			select {
			case <-crashed:
				return nil
			default:
			}
			var ok bool
			if doc, ok = e.result("crashy-1"); ok && doc.State == spool.StateDead {
				return nil
			}
			return errors.New("the task neither ran nor was dead-lettered")
		})
		stopped = true
		if err := w.Stop(testCtx(t)); err != nil {
			t.Fatal(err)
		}
		if doc.State == spool.StateDead {
			if doc.Reason != spool.ReasonMaxDeliver || doc.Attempts != maxRuns {
				t.Errorf("dead letter of reason %q after %d attempts, want %q after %d", doc.Reason, doc.Attempts, spool.ReasonMaxDeliver, maxRuns)
			}
			break
		}
		runs++
		if runs > maxRuns {
			t.Fatalf("the task ran %d times, max deliver allows %d", runs, maxRuns)
		}
	}
	if runs != maxRuns {
		t.Errorf("the task ran %d times before its dead letter, want %d", runs, maxRuns)
	}
	if n := e.streamMsgs(e.names.DLQStream()); n != 1 {
		t.Errorf("%d dead letters, want 1", n)
	}
}
