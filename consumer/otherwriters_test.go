package consumer_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/spoolq/spool/consumer"
	spool "github.com/spoolq/spool/shared"
	"github.com/spoolq/spool/streams"
	"github.com/spoolq/spool/streams/streamstest"
)

// A result document that is not RFC 8259 JSON, as a worker in another
// language stores it when its encoder writes NaN, does not wedge the task:
// a Go worker that meets it writes its own outcome over it, and a stored
// cancellation still wins.
func TestUndecodableStoredDocument(t *testing.T) {
	t.Parallel()
	e := newEnv(t, streams.Settings{Consumers: streams.ConsumersByPriority})
	mux := consumer.NewMux()
	mux.HandleFunc("nan.ok", func(ctx context.Context, task *consumer.Task) ([]byte, error) {
		return []byte(`{"v":1}`), nil
	})
	e.worker(mux)
	kv, err := e.js.KeyValue(testCtx(t), e.names.ResultsBucket())
	if err != nil {
		t.Fatal(err)
	}
	docs := map[string]string{
		"nan-processing": `{"id":"nan-processing","type":"nan.ok","priority":"normal","state":"processing","attempts":1,` +
			`"progress":{"percent":NaN},"enqueued_at":"2026-01-01T00:00:00Z"}`,
		"nan-completed": `{"id":"nan-completed","type":"nan.ok","priority":"normal","state":"completed","attempts":1,` +
			`"result":NaN,"enqueued_at":"2026-01-01T00:00:00Z"}`,
	}
	const cancelled = "nan-cancelled"
	docs[cancelled] = `{"id":"nan-cancelled","type":"nan.ok","priority":"normal","state":"retrying","attempts":1,` +
		`"progress":{"value":[Infinity]},"enqueued_at":"2026-01-01T00:00:00Z"}`
	cancels, err := e.js.KeyValue(testCtx(t), e.names.CancelBucket())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cancels.PutString(testCtx(t), cancelled, `{"id":"nan-cancelled","by":"ops","at":"2026-01-01T00:00:00Z"}`); err != nil {
		t.Fatal(err)
	}
	for id, doc := range docs {
		if _, err := kv.PutString(testCtx(t), id, doc); err != nil {
			t.Fatal(err)
		}
		e.publishID(spool.Normal, "nan.ok", id, nil, nil)
	}
	for id := range docs {
		var got spool.Result
		streamstest.WaitFor(t, 15*time.Second, func() error {
			entry, err := kv.Get(testCtx(t), id)
			if err != nil {
				return err
			}
			if err := json.Unmarshal(entry.Value(), &got); err != nil {
				return fmt.Errorf("%s: %w", id, err)
			}
			want := spool.StateCompleted
			if id == cancelled {
				want = spool.StateCancelled
			}
			if got.State != want {
				return fmt.Errorf("%s is %s, want %s", id, got.State, want)
			}
			return nil
		})
		if id == cancelled {
			if got.CancelledBy != "ops" {
				t.Errorf("%s: stored %+v, want the cancellation's", id, got)
			}
			continue
		}
		if string(got.Result) != `{"v":1}` || got.Attempts != 1 {
			t.Errorf("%s: stored %+v, want the Go worker's outcome", id, got)
		}
	}
}

// A failed or snoozed attempt stores its retrying or snoozed state over the
// revision it read, as a completed one does: a cancelled document written
// meanwhile, by a canceller this worker has not heard from, is never
// replaced, and the task ends cancelled without another attempt.
func TestRetryingStateYieldsToCancelled(t *testing.T) {
	t.Parallel()
	e := newEnv(t, streams.Settings{Consumers: streams.ConsumersByPriority})
	kv, err := e.js.KeyValue(testCtx(t), e.names.ResultsBucket())
	if err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	var runs log[string]
	mux := consumer.NewMux()
	mux.HandleFunc("yield.fail", func(ctx context.Context, task *consumer.Task) ([]byte, error) {
		runs.add(task.ID)
		<-release
		return nil, errors.New("failed")
	})
	mux.HandleFunc("yield.snooze", func(ctx context.Context, task *consumer.Task) ([]byte, error) {
		runs.add(task.ID)
		<-release
		return nil, consumer.Snooze(time.Second)
	})
	e.worker(mux, consumer.WithProcessingDelay(0))
	ids := map[string]string{"y-fail": "yield.fail", "y-snooze": "yield.snooze"}
	for id, typ := range ids {
		e.publishID(spool.Normal, typ, id, nil, map[string]string{spool.HeaderMaxRetries: "3"})
	}
	for id := range ids {
		e.waitResult(id, spool.StateProcessing, 10*time.Second)
		doc := fmt.Sprintf(`{"id":%q,"type":%q,"priority":"normal","state":"cancelled","attempts":1,`+
			`"cancelled_by":"raw","enqueued_at":"2026-01-01T00:00:00Z","finished_at":"2026-01-01T00:00:01Z"}`, id, ids[id])
		if _, err := kv.PutString(testCtx(t), id, doc); err != nil {
			t.Fatal(err)
		}
	}
	close(release)
	streamstest.WaitFor(t, 10*time.Second, func() error {
		if n := e.taskMsgs(); n != 0 {
			return fmt.Errorf("%d tasks still queued", n)
		}
		return nil
	})
	for id := range ids {
		if got, _ := e.result(id); got.State != spool.StateCancelled || got.CancelledBy != "raw" {
			t.Errorf("%s: stored %+v, want the cancelled document kept", id, got)
		}
	}
	if n := runs.len(); n != len(ids) {
		t.Errorf("%d attempts ran, want %d: %v", n, len(ids), runs.snapshot())
	}
}

// A dead letter's Spool-Attempts is the attempt number, as the dead
// document's attempts, not the deliveries made: a snoozed delivery is no
// attempt. Its Spool-Error is one header line: the line breaks of the error
// text become spaces.
func TestDeadLetterAttemptsAndErrorLine(t *testing.T) {
	t.Parallel()
	e := newEnv(t, streams.Settings{Consumers: streams.ConsumersByPriority})
	mux := consumer.NewMux()
	var deliveries log[int]
	mux.HandleFunc("dl.attempts", func(ctx context.Context, task *consumer.Task) ([]byte, error) {
		if deliveries.add(task.Attempt) == 1 {
			return nil, consumer.Snooze(10 * time.Millisecond)
		}
		return nil, consumer.Permanent(errors.New("line one\r\nline two\nline three"))
	})
	e.worker(mux)
	e.publishID(spool.Normal, "dl.attempts", "dl-1", nil, nil)
	dead := e.waitResult("dl-1", spool.StateDead, 10*time.Second)
	if dead.Attempts != 1 || deliveries.len() != 2 {
		t.Fatalf("dead document %+v after %d deliveries, want attempt 1 after one snooze", dead, deliveries.len())
	}
	dlq, err := e.js.Stream(testCtx(t), e.names.DLQStream())
	if err != nil {
		t.Fatal(err)
	}
	subject, err := e.names.DLQSubject(spool.Normal, "dl.attempts")
	if err != nil {
		t.Fatal(err)
	}
	letter, err := dlq.GetLastMsgForSubject(testCtx(t), subject)
	if err != nil {
		t.Fatalf("dead letter: %v", err)
	}
	if got := letter.Header.Get(spool.HeaderAttempts); got != "1" {
		t.Errorf("Spool-Attempts %q after two deliveries, one a snooze: want the attempt number 1", got)
	}
	if got := letter.Header.Values(spool.HeaderError); len(got) != 1 || got[0] != "line one  line two line three" {
		t.Errorf("Spool-Error %q, want one line with spaces for the line breaks", got)
	}
}
