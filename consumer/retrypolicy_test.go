package consumer_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/spoolq/spool/consumer"
	"github.com/spoolq/spool/consumer/remote"
	spool "github.com/spoolq/spool/shared"
	"github.com/spoolq/spool/streams"
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
	e := newEnv(t, streams.Settings{})
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
