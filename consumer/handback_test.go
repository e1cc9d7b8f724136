package consumer_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/spoolq/spool/consumer"
	spool "github.com/spoolq/spool/shared"
	"github.com/spoolq/spool/shared/limits"
	"github.com/spoolq/spool/streams"
	"github.com/spoolq/spool/streams/admin"
	"github.com/spoolq/spool/streams/streamstest"
)

// enqueueLog records the EnqueuedAt each handler run saw, by task id.
type enqueueLog struct {
	mu  sync.Mutex
	saw map[string]time.Time
}

func (l *enqueueLog) handler(gate func(ctx context.Context, task *consumer.Task) error) consumer.HandlerFunc {
	return func(ctx context.Context, task *consumer.Task) ([]byte, error) {
		if gate != nil {
			if err := gate(ctx, task); err != nil {
				return nil, err
			}
		}
		l.mu.Lock()
		l.saw[task.ID] = task.EnqueuedAt
		l.mu.Unlock()
		return nil, nil
	}
}

// storedAt is the stream timestamp of the task message at seq.
func (e *env) storedAt(seq uint64) time.Time {
	e.t.Helper()
	s, err := e.js.Stream(testCtx(e.t), e.names.TaskStream())
	if err != nil {
		e.t.Fatal(err)
	}
	m, err := s.GetMsg(testCtx(e.t), seq)
	if err != nil {
		e.t.Fatal(err)
	}
	return m.Time
}

// wantKept checks that task id completed with the enqueued_at of its first
// message, that its handler saw that time, and that the document says when
// the copy that ran was handed back.
func (e *env) wantKept(l *enqueueLog, id string, enqueued time.Time) {
	e.t.Helper()
	doc := e.waitResult(id, spool.StateCompleted, 30*time.Second)
	if !doc.EnqueuedAt.Equal(enqueued) {
		e.t.Errorf("task %s: enqueued_at %s, want its first enqueue %s", id, doc.EnqueuedAt, enqueued)
	}
	if doc.HandedBackAt == nil || !doc.HandedBackAt.After(enqueued) {
		e.t.Errorf("task %s: handed_back_at %v, want the hand-back's time, after %s", id, doc.HandedBackAt, enqueued)
	}
	l.mu.Lock()
	saw := l.saw[id]
	l.mu.Unlock()
	if !saw.Equal(enqueued) {
		e.t.Errorf("task %s: the handler saw EnqueuedAt %s, want %s", id, saw, enqueued)
	}
}

// A task handed back keeps its enqueued_at, in every way a worker hands a
// task back: a full rate, a waiting room, a type pause (parked, then moved
// back), and a key's turn (held by the worker or by the producer).
func TestHandedBackTaskKeepsEnqueuedAt(t *testing.T) {
	t.Parallel()
	t.Run("rate", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, streams.Settings{Consumers: streams.ConsumersByPriority})
		e.putRule(limits.Rule{Type: "paced", Rate: &limits.Rate{Limit: 1, Period: limits.Duration(time.Second)}})
		l := &enqueueLog{saw: map[string]time.Time{}}
		var enqueued []time.Time
		for i := range 6 {
			enqueued = append(enqueued, e.storedAt(e.publishID(spool.Normal, "paced", fmt.Sprintf("paced-%d", i), nil, nil)))
		}
		// A worker of four slots pulling by priority: one task runs at
		// once, three wait in its rate line (three quarters of its
		// slots), and the ones pulled beside them find the line full and
		// are handed back.
		e.worker(l.handler(nil), consumer.WithConcurrency(4, 4))
		handedBack := 0
		for i, at := range enqueued {
			id := fmt.Sprintf("paced-%d", i)
			doc := e.waitResult(id, spool.StateCompleted, 30*time.Second)
			if doc.HandedBackAt != nil {
				handedBack++
				e.wantKept(l, id, at)
			}
		}
		if handedBack < 2 {
			t.Errorf("%d of 6 tasks were handed back, want at least 2 under a rate of 1/s", handedBack)
		}
	})
	t.Run("waiting_room", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, streams.Settings{})
		e.putRule(limits.Rule{Type: "capped", Concurrency: 1})
		l := &enqueueLog{saw: map[string]time.Time{}}
		enqueued := map[string]time.Time{}
		for _, id := range []string{"capped-0", "capped-1"} {
			enqueued[id] = e.storedAt(e.publishID(spool.Normal, "capped", id, nil, nil))
		}
		// The task that gets the one slot holds it until the other waits
		// in the room.
		var first sync.Once
		release := make(chan struct{})
		w := e.worker(l.handler(func(ctx context.Context, task *consumer.Task) error {
			blocks := false
			first.Do(func() { blocks = true })
			if !blocks {
				return nil
			}
			select {
			case <-release:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		}), consumer.WithConcurrency(4, 4))
		streamstest.WaitFor(t, 20*time.Second, func() error {
			if n := w.Stats().Flow["capped"].Parked["concurrency"]; n < 1 {
				return fmt.Errorf("%d tasks in the waiting room", n)
			}
			return nil
		})
		close(release)
		waited := ""
		for id := range enqueued {
			if doc := e.waitResult(id, spool.StateCompleted, 30*time.Second); doc.HandedBackAt != nil {
				waited = id
			}
		}
		if waited == "" {
			t.Fatal("no task says it was handed back, although one waited in the room")
		}
		e.wantKept(l, waited, enqueued[waited])
	})
	t.Run("type_pause", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, streams.Settings{})
		ctx := testCtx(t)
		adm, err := admin.New(e.connect(), admin.WithLogger(testLogger(t)))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := adm.PauseType(ctx, "report", admin.TypePauseOptions{}); err != nil {
			t.Fatal(err)
		}
		l := &enqueueLog{saw: map[string]time.Time{}}
		enqueued := e.storedAt(e.publishID(spool.Normal, "report", "r1", nil, nil))
		e.worker(l.handler(nil))
		streamstest.WaitFor(t, 20*time.Second, func() error {
			s, err := e.js.Stream(ctx, e.names.TaskStream())
			if err != nil {
				return err
			}
			info, err := s.Info(ctx, jetstream.WithSubjectFilter(e.names.ParkedFilter()))
			if err != nil {
				return err
			}
			if len(info.State.Subjects) != 1 {
				return fmt.Errorf("parked subjects %v, want r1's", info.State.Subjects)
			}
			return nil
		})
		if err := adm.ResumeType(ctx, "report"); err != nil {
			t.Fatal(err)
		}
		e.wantKept(l, "r1", enqueued)
	})
	t.Run("key_turn", func(t *testing.T) {
		t.Parallel()
		e, turns := newTurnsEnv(t, limits.Rule{Type: "ord", Ordered: limits.OrderHold})
		l := &enqueueLog{saw: map[string]time.Time{}}
		// Held by the worker: published to the task subject directly.
		direct := e.storedAt(e.publishID(spool.Normal, "ord", "ord-direct", nil, map[string]string{spool.HeaderKey: "k1"}))
		// Held by the producer: stored on the key's held subject, then
		// released by a kick.
		subject, err := e.names.TaskSubject(spool.Normal, "ord")
		if err != nil {
			t.Fatal(err)
		}
		m := &nats.Msg{Subject: subject, Header: nats.Header{}}
		m.Header.Set(spool.HeaderMsgID, "ord-held")
		m.Header.Set(spool.HeaderKey, "k2")
		turns.Hold("ord", "k2", m)
		ack, err := e.js.PublishMsg(testCtx(t), m)
		if err != nil {
			t.Fatal(err)
		}
		held := e.storedAt(ack.Sequence)
		if err := turns.Kick(testCtx(t), "ord", "k2", 1); err != nil {
			t.Fatal(err)
		}
		e.worker(l.handler(nil))
		e.wantKept(l, "ord-direct", direct)
		e.wantKept(l, "ord-held", held)
	})
}
