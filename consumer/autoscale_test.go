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

// The pool grows to its maximum under a backlog and shrinks back to its
// minimum after an idle period, without touching running tasks.
func TestAutoscale(t *testing.T) {
	t.Parallel()
	e := newEnv(t, streams.Settings{})
	gate := make(chan struct{})
	var done atomic.Int32
	mux := consumer.NewMux()
	mux.HandleFunc("job", func(ctx context.Context, task *consumer.Task) ([]byte, error) {
		<-gate
		done.Add(1)
		return nil, nil
	})
	w := e.worker(mux, consumer.WithConcurrency(1, 4), consumer.WithAutoscale(0.6, 300*time.Millisecond))
	if s := w.Stats(); s.Slots != 1 {
		t.Fatalf("starts with %d slots, want the minimum 1", s.Slots)
	}
	e.publishMany(spool.Normal, "job", 20, nil)
	streamstest.WaitFor(t, 20*time.Second, func() error {
		s := w.Stats()
		if !(s.Slots == 4 && s.Busy == 4) {
			return errors.New("scaled up to 4 busy slots")
		}
		return nil
	})
	close(gate)
	streamstest.WaitFor(t, 20*time.Second, func() error {
		if done.Load() != 20 {
			return errors.New("all done")
		}
		return nil
	})
	streamstest.WaitFor(t, 20*time.Second, func() error {
		if w.Stats().Slots != 1 {
			return errors.New("scaled down to 1 slot")
		}
		return nil
	})
	s := w.Stats()
	if s.ScaleUps == 0 || s.ScaleDowns == 0 || s.Total().Completed != 20 {
		t.Errorf("stats %+v", s)
	}
	t.Log(s.Summary())
}
