package consumer_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/spoolq/spool/consumer"
	"github.com/spoolq/spool/consumer/remote"
	spool "github.com/spoolq/spool/shared"
	"github.com/spoolq/spool/streams"
	"github.com/spoolq/spool/streams/streamstest"
)

// counter counts calls per task id.
type counter struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *counter) inc(id string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == nil {
		c.n = map[string]int{}
	}
	c.n[id]++
	return c.n[id]
}

// RetryAfter overrides the backoff (an hour here), and the attempt counts.
func TestRetryAfterVerdict(t *testing.T) {
	t.Parallel()
	e := newEnv(t, streams.Settings{})
	var calls counter
	mux := consumer.NewMux()
	mux.HandleFunc("work", func(ctx context.Context, task *consumer.Task) ([]byte, error) {
		if calls.inc(task.ID) == 1 {
			return nil, consumer.RetryAfter(errors.New("rate limited"), 50*time.Millisecond)
		}
		return nil, nil
	})
	e.worker(mux, consumer.WithRetry(time.Hour, time.Hour, 3))
	e.publishID(spool.Normal, "work", "ra1", nil, nil)
	if doc := e.waitResult("ra1", spool.StateCompleted, 10*time.Second); doc.Attempts != 2 {
		t.Fatalf("completed on attempt %d, want 2", doc.Attempts)
	}
}

// A retry-delay function chooses the delay per type; -1 keeps the backoff.
func TestRetryDelayFuncPerType(t *testing.T) {
	t.Parallel()
	e := newEnv(t, streams.Settings{})
	var calls counter
	mux := consumer.NewMux()
	fail := func(ctx context.Context, task *consumer.Task) ([]byte, error) {
		if calls.inc(task.ID) == 1 {
			return nil, errors.New("flaky")
		}
		return nil, nil
	}
	mux.HandleFunc("fast", fail)
	mux.HandleFunc("slow", fail)
	var seen []string
	var mu sync.Mutex
	e.worker(mux, consumer.WithRetry(time.Hour, time.Hour, 3),
		consumer.WithRetryDelayFunc(func(typ string, attempt int, err error) time.Duration {
			mu.Lock()
			seen = append(seen, typ)
			mu.Unlock()
			if typ == "fast" {
				return 20 * time.Millisecond
			}
			return -1
		}))
	e.publishID(spool.Normal, "fast", "f1", nil, nil)
	e.publishID(spool.Normal, "slow", "s1", nil, nil)
	if doc := e.waitResult("f1", spool.StateCompleted, 10*time.Second); doc.Attempts != 2 {
		t.Fatalf("fast completed on attempt %d", doc.Attempts)
	}
	doc := e.waitResult("s1", spool.StateRetrying, 10*time.Second)
	if doc.NextAttempt == nil || time.Until(*doc.NextAttempt) < 50*time.Minute {
		t.Fatalf("slow retries at %v, want the hour of backoff", doc.NextAttempt)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != 2 {
		t.Fatalf("retry-delay function called for %v", seen)
	}
}

// Snoozes do not count as attempts; the task completes on attempt 1.
func TestSnoozeVerdict(t *testing.T) {
	t.Parallel()
	e := newEnv(t, streams.Settings{Consumers: streams.ConsumersByPriority})
	var calls counter
	mux := consumer.NewMux()
	mux.HandleFunc("work", func(ctx context.Context, task *consumer.Task) ([]byte, error) {
		if n := calls.inc(task.ID); n <= 3 {
			if task.Attempt != 1 {
				t.Errorf("call %d sees attempt %d, want 1", n, task.Attempt)
			}
			return nil, consumer.Snooze(20 * time.Millisecond)
		}
		return nil, nil
	})
	e.worker(mux, consumer.WithRetry(time.Hour, time.Hour, 0)) // no retry at all: a counted snooze would dead-letter
	e.publishID(spool.Normal, "work", "z1", nil, nil)
	doc := e.waitResult("z1", spool.StateCompleted, 10*time.Second)
	if doc.Attempts != 1 || doc.Snoozes != 3 {
		t.Fatalf("completed document %+v, want attempt 1 after 3 snoozes", doc)
	}
	if info := e.consumerInfo(spool.Normal); info.Delivered.Consumer != 4 {
		t.Errorf("%d deliveries, want 4", info.Delivered.Consumer)
	}
}

// Snoozes spend JetStream deliveries: past MaxDeliver the task is
// dead-lettered instead of lost in the server's max_deliver.
func TestSnoozePastMaxDeliver(t *testing.T) {
	t.Parallel()
	e := newEnv(t, streams.Settings{MaxDeliver: 3})
	mux := consumer.NewMux()
	mux.HandleFunc("work", func(ctx context.Context, task *consumer.Task) ([]byte, error) {
		return nil, consumer.Snooze(10 * time.Millisecond)
	})
	e.worker(mux)
	e.publishID(spool.Normal, "work", "zz", nil, nil)
	doc := e.waitResult("zz", spool.StateDead, 10*time.Second)
	if doc.Reason != spool.ReasonError || doc.Error != "snoozed past the consumer's max deliveries (3)" || doc.Attempts != 1 {
		t.Fatalf("dead document %+v", doc)
	}
}

// A remote handler gives the same verdicts with reply headers.
func TestRemoteVerdictHeaders(t *testing.T) {
	t.Parallel()
	e := newEnv(t, streams.Settings{})
	rc := e.connect()
	var calls counter
	if _, err := rc.Subscribe("svc.verdicts", func(m *nats.Msg) {
		reply := nats.NewMsg(m.Reply)
		switch calls.inc(m.Header.Get(spool.HeaderTaskID)) {
		case 1:
			reply.Header.Set(remote.HeaderSnooze, "10ms")
		case 2:
			reply.Header.Set(spool.HeaderError, "busy")
			reply.Header.Set(remote.HeaderRetryAfter, "10ms")
		default:
			reply.Data = []byte(`{"ok":true}`)
		}
		_ = m.RespondMsg(reply)
	}); err != nil {
		t.Fatal(err)
	}
	if err := rc.Flush(); err != nil {
		t.Fatal(err)
	}
	mux := consumer.NewMux()
	mux.Handle("work", remote.Handler(e.connect(), "svc.verdicts"))
	e.worker(mux, consumer.WithRetry(time.Hour, time.Hour, 3))
	e.publishID(spool.Normal, "work", "rv1", nil, nil)
	doc := e.waitResult("rv1", spool.StateCompleted, 10*time.Second)
	if doc.Attempts != 2 || doc.Snoozes != 1 || string(doc.Result) != `{"ok":true}` {
		t.Fatalf("completed document %+v, want attempt 2 after one snooze", doc)
	}
}

// Retry delays follow min(base·2^(attempt-1), max) + up to 20% jitter: the
// server never redelivers before the delay, and the retrying document
// names the next attempt time.
func TestRetryBackoff(t *testing.T) {
	t.Parallel()
	e := newEnv(t, streams.Settings{})
	base, maxDelay := 50*time.Millisecond, 150*time.Millisecond
	var starts log[time.Time]
	writes := e.resultWrites("retry-1")
	mux := consumer.NewMux()
	mux.HandleFunc("flaky", func(ctx context.Context, task *consumer.Task) ([]byte, error) {
		starts.add(time.Now())
		if task.Attempt <= 3 {
			return nil, fmt.Errorf("failure %d", task.Attempt)
		}
		return []byte(`"ok"`), nil
	})
	// Processing written as every attempt starts (the default waits 1s).
	e.worker(mux, consumer.WithRetry(base, maxDelay, 5), consumer.WithProcessingDelay(0))
	e.publishID(spool.High, "flaky", "retry-1", nil, nil)
	doc := e.waitResult("retry-1", spool.StateCompleted, 20*time.Second)
	if doc.Attempts != 4 || string(doc.Result) != `"ok"` {
		t.Fatalf("result %+v", doc)
	}
	s := starts.snapshot()
	if len(s) != 4 {
		t.Fatalf("%d attempts, want 4", len(s))
	}
	for k := 1; k < len(s); k++ {
		want := consumer.Backoff(base, maxDelay, k)
		gap := s[k].Sub(s[k-1])
		t.Logf("after attempt %d: gap %s, backoff %s", k, gap, want)
		if gap < want {
			t.Errorf("attempt %d came %s after attempt %d, before its backoff %s", k+1, gap, k, want)
		}
	}
	// The document went processing → retrying (×3, with the error and the
	// next attempt time) → processing → completed. A retrying or completed
	// write over the revision the attempt read loses to the attempt's own
	// processing state and is sent again over the revision read then, so
	// the subject carries it twice in a row and the stream stores it once.
	var states []string
	for len(states) == 0 || states[len(states)-1] != "completed/4" {
		d := nextWrites(t, writes, 1)[0]
		state := fmt.Sprintf("%s/%d", d.State, d.Attempts)
		if len(states) > 0 && states[len(states)-1] == state {
			continue
		}
		states = append(states, state)
		if d.State == spool.StateRetrying {
			if d.NextAttempt == nil || !strings.Contains(d.Error, "failure") {
				t.Errorf("retrying document %+v", d)
			} else if ahead := d.NextAttempt.Sub(*d.StartedAt); ahead < consumer.Backoff(base, maxDelay, d.Attempts) {
				t.Errorf("next attempt %s after the start of attempt %d, before its backoff", ahead, d.Attempts)
			}
		}
	}
	want := "processing/1 retrying/1 processing/2 retrying/2 processing/3 retrying/3 processing/4 completed/4"
	if got := strings.Join(states, " "); got != want {
		t.Errorf("document states %s, want %s", got, want)
	}
}

// Tasks waiting in backoff hold no slot: fresh tasks of the same priority
// run while they wait.
func TestBackoffDoesNotBlockFresh(t *testing.T) {
	t.Parallel()
	e := newEnv(t, streams.Settings{Consumers: streams.ConsumersByPriority})
	mux := consumer.NewMux()
	mux.HandleFunc("fail", func(ctx context.Context, task *consumer.Task) ([]byte, error) {
		return nil, errors.New("not yet")
	})
	mux.HandleFunc("ok", func(ctx context.Context, task *consumer.Task) ([]byte, error) {
		return nil, nil
	})
	w := e.worker(mux, consumer.WithConcurrency(2, 2), consumer.WithRetry(time.Hour, time.Hour, 3))
	for i := range 20 {
		e.publishID(spool.Normal, "fail", "fail-"+itoa(i), nil, nil)
	}
	streamstest.WaitFor(t, 20*time.Second, func() error {
		if w.Stats().Priorities[spool.Normal].Retried != 20 {
			return errors.New("failing tasks in backoff")
		}
		return nil
	})
	for i := range 20 {
		e.publishID(spool.Normal, "ok", "ok-"+itoa(i), nil, nil)
	}
	for i := range 20 {
		e.waitResult("ok-"+itoa(i), spool.StateCompleted, 20*time.Second)
	}
	// Results are stored before the ack: wait for the acks to land.
	streamstest.WaitFor(t, 10*time.Second, func() error {
		if e.consumerInfo(spool.Normal).NumAckPending != 20 {
			return errors.New("only the 20 tasks in backoff ack-pending")
		}
		return nil
	})
	doc, _ := e.result("fail-0")
	if doc.State != spool.StateRetrying || doc.NextAttempt == nil || time.Until(*doc.NextAttempt) < 50*time.Minute {
		t.Errorf("backoff document %+v", doc)
	}
}
