package control_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/spoolq/spool/consumer"
	"github.com/spoolq/spool/producer"
	spool "github.com/spoolq/spool/shared"
	"github.com/spoolq/spool/streams/streamstest"
)

// cancelledEvents counts the cancelled events of task id that sub holds
// once the worker settled the task: the worker publishes its event before
// it terminates the task's message, and the canceller before Cancel
// returns, so once the message is gone from the stream and the
// canceller's connection pc is flushed, a flush of sub's connection nc
// has every event of the task in sub.
func cancelledEvents(t *testing.T, s *stack, pc, nc *nats.Conn, sub *nats.Subscription, id string) int {
	t.Helper()
	ctx := streamstest.Context(t)
	streamstest.WaitFor(t, 20*time.Second, func() error {
		info, err := s.env.Stream(t, "SPOOL_TASKS").Info(ctx)
		if err != nil {
			return err
		}
		if info.State.Msgs != 0 {
			return fmt.Errorf("task %s is still in the stream", id)
		}
		return nil
	})
	for _, c := range []*nats.Conn{pc, nc} {
		if err := c.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	n := 0
	for {
		m, err := sub.NextMsg(0)
		if err != nil {
			return n
		}
		var ev spool.Event
		if err := json.Unmarshal(m.Data, &ev); err != nil {
			t.Fatalf("event %q: %v", m.Data, err)
		}
		if ev.Event != spool.EventCancelled || ev.Task.ID != id || ev.Task.State != spool.StateCancelled {
			t.Fatalf("event %+v on %s, want task %s cancelled", ev, m.Subject, id)
		}
		n++
	}
}

// A cancel publishes one cancelled event, whether the worker meets the
// task queued (it drops it) or running (it stops the handler): the
// canceller stores the cancelled document and announces it, and the
// worker that settles the task after it does not announce it again.
func TestOneCancelledEventPerCancel(t *testing.T) {
	t.Parallel()
	for _, running := range []bool{false, true} {
		name := map[bool]string{false: "queued", true: "running"}[running]
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s := newStack(t)
			ctx := streamstest.Context(t)
			pc := s.env.Connect(t)
			client, err := producer.New(pc, producer.WithLogger(streamstest.Logger(t)))
			if err != nil {
				t.Fatal(err)
			}
			raw := s.env.Connect(t)
			id := "cancel-" + name
			sub, err := raw.SubscribeSync("spool.events.cancelled.*." + id + ".>")
			if err != nil {
				t.Fatal(err)
			}
			if err := raw.Flush(); err != nil {
				t.Fatal(err)
			}
			started := make(chan struct{})
			mux := consumer.NewMux()
			mux.HandleFunc("slow", func(ctx context.Context, task *consumer.Task) ([]byte, error) {
				close(started)
				<-ctx.Done()
				return nil, ctx.Err()
			})
			if running {
				s.worker(t, mux)
			}
			if _, err := client.Enqueue(ctx, producer.NewTask("slow", nil), producer.TaskID(id)); err != nil {
				t.Fatal(err)
			}
			if running {
				<-started
			}
			if _, err := client.Cancel(ctx, id, producer.CancelBy("ops")); err != nil {
				t.Fatal(err)
			}
			if !running {
				s.worker(t, mux)
			}
			if n := cancelledEvents(t, s, pc, raw, sub, id); n != 1 {
				t.Errorf("%d cancelled events for one cancel, want 1", n)
			}
			r, err := client.Result(ctx, id)
			if err != nil || r.State != spool.StateCancelled || r.CancelledBy != "ops" {
				t.Errorf("result %+v, %v", r, err)
			}
		})
	}
}
