package consumer_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/spoolq/spool/consumer"
	spool "github.com/spoolq/spool/shared"
	"github.com/spoolq/spool/streams"
	"github.com/spoolq/spool/streams/streamstest"
)

// A handler that runs longer than AckWait heartbeats and is never
// redelivered; one that overruns its Spool-Timeout fails with reason
// timeout; a panic is a failed attempt and the worker lives on.
func TestTimeoutHeartbeatPanic(t *testing.T) {
	t.Parallel()
	e := newEnv(t, streams.Settings{Consumers: streams.ConsumersByPriority, AckWait: time.Second})
	var longRuns, panics atomic.Int32
	mux := consumer.NewMux()
	mux.HandleFunc("long", func(ctx context.Context, task *consumer.Task) ([]byte, error) {
		longRuns.Add(1)
		select { // the task's own work: 3× AckWait
		case <-time.After(3 * time.Second):
			return []byte(`"done"`), nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	})
	mux.HandleFunc("slow", func(ctx context.Context, task *consumer.Task) ([]byte, error) {
		<-ctx.Done()
		return nil, ctx.Err()
	})
	mux.HandleFunc("panicky", func(ctx context.Context, task *consumer.Task) ([]byte, error) {
		if task.Attempt == 1 {
			panics.Add(1)
			panic("boom")
		}
		return []byte(`"recovered"`), nil
	})
	// The long task's writes: with the default ProcessingDelay (1s, past
	// the first heartbeats at AckWait/3) its processing state is written
	// from the heartbeat's timer.
	writes := e.resultWrites("long-1")
	w := e.worker(mux, consumer.WithConcurrency(3, 3), consumer.WithRetry(20*time.Millisecond, 20*time.Millisecond, 3))
	e.publishID(spool.Normal, "long", "long-1", nil, nil)
	e.publishID(spool.Normal, "slow", "slow-1", nil, map[string]string{spool.HeaderTimeout: "100ms", spool.HeaderMaxRetries: "1"})
	e.publishID(spool.Normal, "panicky", "panic-1", nil, nil)

	doc := e.waitResult("long-1", spool.StateCompleted, 20*time.Second)
	if doc.Attempts != 1 || longRuns.Load() != 1 {
		t.Errorf("long task: %d runs, document %+v: heartbeats did not hold it", longRuns.Load(), doc)
	}
	var states []spool.State
	for _, d := range nextWrites(t, writes, 2) {
		states = append(states, d.State)
	}
	if !slices.Equal(states, []spool.State{spool.StateProcessing, spool.StateCompleted}) {
		t.Errorf("long task writes %v, want processing then completed", states)
	}
	doc = e.waitResult("slow-1", spool.StateDead, 20*time.Second)
	if doc.Reason != spool.ReasonTimeout || doc.Attempts != 2 || !strings.Contains(doc.Error, "timed out") {
		t.Errorf("slow task document %+v", doc)
	}
	doc = e.waitResult("panic-1", spool.StateCompleted, 20*time.Second)
	if doc.Attempts != 2 || panics.Load() != 1 {
		t.Errorf("panicky task document %+v", doc)
	}
	if c := w.Stats().Types["panicky"]; c.Failed != 1 || c.Retried != 1 || c.Completed != 1 {
		t.Errorf("panicky counters %+v", c)
	}
	streamstest.WaitFor(t, 10*time.Second, func() error {
		if !(e.consumerInfo(spool.Normal).NumAckPending == 0 && e.taskMsgs() == 0) {
			return errors.New("every task settled")
		}
		return nil
	})
}

// With a processing delay, an attempt that runs longer than the delay
// still shows "processing", and its final state always wins.
func TestProcessingDelay(t *testing.T) {
	t.Parallel()
	e := newEnv(t, streams.Settings{})
	release := make(chan struct{})
	mux := consumer.NewMux()
	mux.HandleFunc("slow", func(ctx context.Context, task *consumer.Task) ([]byte, error) {
		<-release
		return []byte(`"slow"`), nil
	})
	mux.HandleFunc("fast", func(ctx context.Context, task *consumer.Task) ([]byte, error) {
		return []byte(`"fast"`), nil
	})
	e.worker(mux, consumer.WithProcessingDelay(50*time.Millisecond))
	for i := range 50 {
		e.publishID(spool.High, "fast", "fast-"+itoa(i), nil, nil)
	}
	e.publishID(spool.High, "slow", "slow-1", nil, nil)
	doc := e.waitResult("slow-1", spool.StateProcessing, 10*time.Second)
	if doc.StartedAt == nil || doc.Attempts != 1 {
		t.Errorf("processing document %+v", doc)
	}
	close(release)
	e.waitResult("slow-1", spool.StateCompleted, 10*time.Second)
	for i := range 50 {
		e.waitResult("fast-"+itoa(i), spool.StateCompleted, 10*time.Second)
	}
}

// A handler that ignores its deadline does not hold its task: the attempt
// is settled (here: dead, reason timeout) while the handler still runs, and
// the slot stays busy until it returns.
func TestHandlerIgnoringDeadline(t *testing.T) {
	t.Parallel()
	e := newEnv(t, streams.Settings{})
	release := make(chan struct{})
	mux := consumer.NewMux()
	mux.HandleFunc("stubborn", func(ctx context.Context, task *consumer.Task) ([]byte, error) {
		<-release // ignores ctx
		return []byte(`"late"`), nil
	})
	w := e.worker(mux, consumer.WithConcurrency(1, 1))
	e.publishID(spool.Normal, "stubborn", "stubborn-1", nil, map[string]string{spool.HeaderTimeout: "50ms", spool.HeaderMaxRetries: "0"})
	doc := e.waitResult("stubborn-1", spool.StateDead, 10*time.Second)
	if doc.Reason != spool.ReasonTimeout {
		t.Errorf("dead document %+v", doc)
	}
	if s := w.Stats(); s.Busy != 1 {
		t.Errorf("%d busy slots while the stubborn handler runs, want 1", s.Busy)
	}
	close(release)
	streamstest.WaitFor(t, 10*time.Second, func() error {
		if w.Stats().Busy != 0 {
			return errors.New("slot freed")
		}
		return nil
	})
	if doc, _ := e.result("stubborn-1"); doc.State != spool.StateDead {
		t.Errorf("the late return overwrote the dead document: %+v", doc)
	}
}

// What a handler sees of its deadline: ctx reports it, and once it passes
// ctx, the contexts the handler derived from it and a NATS request made
// with it all end with DeadlineExceeded. The attempt is retried with the
// timeout as its error.
func TestHandlerContextAtDeadline(t *testing.T) {
	t.Parallel()
	e := newEnv(t, streams.Settings{})
	const timeout = 300 * time.Millisecond
	silent := e.connect()
	if _, err := silent.Subscribe("silent.service", func(*nats.Msg) {}); err != nil {
		t.Fatal(err)
	}
	if err := silent.Flush(); err != nil {
		t.Fatal(err)
	}
	requester := e.connect()
	seen := make(chan []string, 1)
	mux := consumer.NewMux()
	mux.HandleFunc("late", func(ctx context.Context, task *consumer.Task) ([]byte, error) {
		if task.Attempt > 1 {
			return []byte(`"ok"`), nil
		}
		var wrong []string
		if dl, ok := ctx.Deadline(); !ok || time.Until(dl) > timeout || time.Until(dl) < -timeout {
			wrong = append(wrong, fmt.Sprintf("deadline %v, %v: want about %s from now", dl, ok, timeout))
		}
		derived, cancel := context.WithCancel(ctx)
		defer cancel()
		longer, cancelLonger := context.WithTimeout(context.WithValue(ctx, ctxKey{}, 1), time.Hour)
		defer cancelLonger()
		_, err := requester.RequestWithContext(ctx, "silent.service", nil)
		if !errors.Is(err, context.DeadlineExceeded) {
			wrong = append(wrong, fmt.Sprintf("request: %v, want DeadlineExceeded", err))
		}
		for name, c := range map[string]context.Context{"ctx": ctx, "derived": derived, "longer": longer} {
			<-c.Done()
			if !errors.Is(c.Err(), context.DeadlineExceeded) || !errors.Is(context.Cause(c), context.DeadlineExceeded) {
				wrong = append(wrong, fmt.Sprintf("%s: Err %v, Cause %v, want DeadlineExceeded", name, c.Err(), context.Cause(c)))
			}
		}
		seen <- wrong
		return nil, err
	})
	writes := e.resultWrites("late-1")
	e.worker(mux, consumer.WithRetry(10*time.Millisecond, 10*time.Millisecond, 3))
	e.publishID(spool.Normal, "late", "late-1", nil, map[string]string{spool.HeaderTimeout: timeout.String()})
	select {
	case wrong := <-seen:
		for _, w := range wrong {
			t.Error(w)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("handler never saw its deadline")
	}
	var retrying *spool.Result
	for retrying == nil {
		d := nextWrites(t, writes, 1)[0]
		if d.State == spool.StateRetrying {
			retrying = &d
		}
	}
	if !strings.Contains(retrying.Error, "timed out") || !strings.Contains(retrying.Error, "deadline exceeded") {
		t.Errorf("retrying document %+v, want the timeout error", retrying)
	}
	e.waitResult("late-1", spool.StateCompleted, 20*time.Second)
}

type ctxKey struct{}
