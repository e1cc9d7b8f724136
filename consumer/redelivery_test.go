package consumer_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/spoolq/spool/consumer"
	spool "github.com/spoolq/spool/shared"
	"github.com/spoolq/spool/streams"
	"github.com/spoolq/spool/streams/streamstest"
)

// A redelivered task whose final result is stored already (its ack or
// term was lost after the write: a worker killed in between, a leader
// change) is settled without running again, its outcome as stored: a
// completed task acked, a dead one removed with its dead letter left as it
// was (no second one), and its unique key released. A document of an
// earlier message under the same id (another enqueue time) does not count:
// that task runs.
func TestRedeliveryOfStoredOutcome(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name    string
		state   spool.State
		sameEnq bool
		runs    int32
	}{
		{"completed", spool.StateCompleted, true, 0},
		{"dead", spool.StateDead, true, 0},
		{"dead, of an earlier message", spool.StateDead, false, 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, streams.Settings{Consumers: streams.ConsumersByPriority})
			ctx := testCtx(t)
			const id, key = "stored-1", "one-at-a-time"
			e.publishID(spool.Normal, "job", id, []byte(`{}`), map[string]string{spool.HeaderUniqueKey: key, spool.HeaderUniqueTTL: "1h"})
			unique, err := e.js.KeyValue(ctx, e.names.UniqueBucket())
			if err != nil {
				t.Fatal(err)
			}
			if _, err := unique.Put(ctx, spool.UniqueKVKey(key), []byte(id)); err != nil {
				t.Fatal(err)
			}

			// An earlier attempt: delivered once, its outcome stored, its
			// ack never sent (the NAK stands for the lost ack and makes the
			// redelivery immediate).
			first := e.fetchOne(spool.Normal)
			md, err := first.Metadata()
			if err != nil {
				t.Fatal(err)
			}
			doc := spool.Result{ID: id, Type: "job", Priority: spool.Normal, State: c.state, Attempts: 1, EnqueuedAt: md.Timestamp}
			if !c.sameEnq {
				doc.EnqueuedAt = md.Timestamp.Add(-time.Hour)
			}
			if c.state == spool.StateDead {
				doc.Reason, doc.Error = spool.ReasonPermanent, "bad recipient"
			}
			e.putResult(doc)
			if err := first.Nak(); err != nil {
				t.Fatal(err)
			}

			var runs atomic.Int32
			mux := consumer.NewMux()
			mux.HandleFunc("job", func(ctx context.Context, task *consumer.Task) ([]byte, error) {
				runs.Add(1)
				return nil, nil
			})
			w := e.worker(mux)
			streamstest.WaitFor(t, 30*time.Second, func() error {
				if n := e.taskMsgs(); n != 0 {
					return fmt.Errorf("%d task messages left", n)
				}
				return nil
			})
			if got := runs.Load(); got != c.runs {
				t.Fatalf("handler ran %d times, want %d", got, c.runs)
			}
			if got, want := w.Stats().Total().AckedStored, uint64(1-c.runs); got != want {
				t.Errorf("AckedStored = %d, want %d", got, want)
			}
			got, _ := e.result(id)
			want := c.state
			if c.runs > 0 {
				want = spool.StateCompleted
			}
			if got.State != want {
				t.Errorf("result state %s, want %s", got.State, want)
			}
			if n := e.streamMsgs(e.names.DLQStream()); n != 0 {
				t.Errorf("%d dead letters, want none (the stored outcome's letter is not this test's)", n)
			}
			streamstest.WaitFor(t, 10*time.Second, func() error {
				_, err := unique.Get(ctx, spool.UniqueKVKey(key))
				if errors.Is(err, jetstream.ErrKeyNotFound) {
					return nil
				}
				return fmt.Errorf("unique key still held (err %v)", err)
			})
		})
	}
}

// putResult stores doc as its task's result document.
func (e *env) putResult(doc spool.Result) {
	e.t.Helper()
	kv, err := e.js.KeyValue(testCtx(e.t), e.names.ResultsBucket())
	if err != nil {
		e.t.Fatal(err)
	}
	b, err := json.Marshal(doc)
	if err != nil {
		e.t.Fatal(err)
	}
	if _, err := kv.Put(testCtx(e.t), doc.ID, b); err != nil {
		e.t.Fatal(err)
	}
}
