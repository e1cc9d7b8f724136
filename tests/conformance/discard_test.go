package conformance_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/spoolq/spool/consumer"
	"github.com/spoolq/spool/producer"
	spool "github.com/spoolq/spool/shared"
	"github.com/spoolq/spool/streams/streamstest"
)

// A task whose result is discarded, by its own policy or by the worker's
// rule for its type, completes without a result document: a Wait opened
// before it ran ends as it completes, with ErrResultDiscarded, and one
// opened after ends at once. A failing one is retried and dead-lettered
// with its reason as any task; a task that keeps its result beside them
// still has it.
func testDiscardedResult(t *testing.T, s *stack) {
	mux := consumer.NewMux()
	mux.HandleFunc("metrics.push", func(context.Context, *consumer.Task) ([]byte, error) { return []byte(`{"sent":1}`), nil })
	mux.HandleFunc("report.build", func(context.Context, *consumer.Task) ([]byte, error) { return []byte(`{"pages":3}`), nil })
	mux.HandleFunc("card.charge", func(context.Context, *consumer.Task) ([]byte, error) { return nil, errors.New("declined") })
	ctx := streamstest.Context(t)
	byTask := s.enqueue(producer.NewTask("report.build", nil), producer.DiscardResult())
	byType := s.enqueue(producer.NewTask("metrics.push", nil))
	kept := s.enqueue(producer.NewTask("metrics.push", nil), producer.KeepResult())
	failing := s.enqueue(producer.NewTask("card.charge", nil), producer.DiscardResult(), producer.MaxRetries(1))
	waits := map[string]chan error{}
	for _, id := range []string{byTask.ID, byType.ID} {
		done := make(chan error, 1)
		waits[id] = done
		go func() {
			_, err := s.client.Wait(ctx, id)
			done <- err
		}()
	}
	s.worker(mux, consumer.WithDiscardResults("metrics.*"))
	started := time.Now()
	for id, done := range waits {
		if err := <-done; !errors.Is(err, producer.ErrResultDiscarded) {
			t.Errorf("Wait for %s: %v, want ErrResultDiscarded", id, err)
		}
	}
	// The waits end as the tasks complete, not at Wait's recheck.
	if took := time.Since(started); took >= producer.WaitRecheck {
		t.Errorf("the waits took %s", took)
	}
	for _, id := range []string{byTask.ID, byType.ID} {
		if _, err := s.client.Wait(ctx, id); !errors.Is(err, producer.ErrResultDiscarded) {
			t.Errorf("Wait for %s after it completed: %v", id, err)
		}
	}
	if r := s.wait(kept.ID, spool.StateCompleted); string(r.Result) != `{"sent":1}` {
		t.Errorf("kept result %+v", r)
	}
	r := s.wait(failing.ID, spool.StateDead)
	if r.Reason != spool.ReasonError || r.Attempts != 2 || r.Error != "declined" {
		t.Errorf("dead result %+v, want reason error after 2 attempts", r)
	}
	if h := s.deadLetter(spool.Normal, "card.charge").Header; h.Get(spool.HeaderReason) != string(spool.ReasonError) {
		t.Errorf("dead-letter headers %v", h)
	}
	s.waitEmpty()
}
