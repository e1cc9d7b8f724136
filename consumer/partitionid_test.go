package consumer_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/spoolq/spool/consumer"
	spool "github.com/spoolq/spool/shared"
	"github.com/spoolq/spool/streams"
)

// Tasks published without an id to two partitions share their stream
// sequences; each still completes once under its own id, p1-<seq> on
// partition 1, with its own result document, and a task of partition 1
// that dies is dead-lettered and recorded under its p1-<seq> id.
func TestPartitionTasksWithoutIDs(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{streams.ConsumersByType, streams.ConsumersByPriority} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			e := newPartitionedEnv(t, 2, streams.Settings{Consumers: mode})
			types := [2]string{e.typeIn("noid", spool.Normal, 0), e.typeIn("noid", spool.Normal, 1)}
			dies := e.typeIn("noid.dies", spool.Normal, 1)
			// The probes of typeIn used sequences unevenly: line the two
			// partitions up so that their tasks get the same sequences.
			first := e.alignPartitions(types)

			var mu sync.Mutex
			ran := map[string][]string{} // task id → payloads run under it
			mux := consumer.NewMux()
			for _, typ := range types {
				mux.HandleFunc(typ, func(_ context.Context, task *consumer.Task) ([]byte, error) {
					mu.Lock()
					ran[task.ID] = append(ran[task.ID], string(task.Payload))
					mu.Unlock()
					return task.Payload, nil
				})
			}
			mux.HandleFunc(dies, func(context.Context, *consumer.Task) ([]byte, error) {
				return nil, consumer.Permanent(errors.New("broken input"))
			})

			const per = 5
			want := map[string]string{} // task id → payload
			for k, typ := range types {
				for i := range per {
					payload := fmt.Sprintf(`"part%d-%d"`, k, i)
					seq := e.publish(spool.Normal, typ, []byte(payload), nil)
					if seq != first+uint64(i) {
						t.Fatalf("partition %d task %d stored at %d, want %d", k, i, seq, first+uint64(i))
					}
					id := strconv.FormatUint(seq, 10)
					if k > 0 {
						id = "p" + strconv.Itoa(k) + "-" + id
					}
					want[id] = payload
				}
			}
			deadSeq := e.publish(spool.Normal, dies, nil, nil)
			deadID := "p1-" + strconv.FormatUint(deadSeq, 10)

			e.worker(mux)
			for id, payload := range want {
				doc := e.waitResult(id, spool.StateCompleted, 10*time.Second)
				if out, err := doc.Output(); err != nil || string(out) != payload {
					t.Errorf("task %s stored output %q (%v), want %q", id, out, err, payload)
				}
			}
			dead := e.waitResult(deadID, spool.StateDead, 10*time.Second)
			if dead.Type != dies || dead.Reason != spool.ReasonPermanent {
				t.Errorf("dead result of %s: type %q reason %q", deadID, dead.Type, dead.Reason)
			}
			letter := e.lastDeadLetter(dies)
			if got := letter.Header.Get(spool.HeaderTaskID); got != deadID {
				t.Errorf("dead letter of %s has %s %q", deadID, spool.HeaderTaskID, got)
			}

			mu.Lock()
			defer mu.Unlock()
			if len(ran) != len(want) {
				t.Errorf("handlers ran under %d ids, want %d: %v", len(ran), len(want), ran)
			}
			for id, payloads := range ran {
				if len(payloads) != 1 || payloads[0] != want[id] {
					t.Errorf("task %s ran %v, want once with %s", id, payloads, want[id])
				}
			}
		})
	}
}

// alignPartitions publishes and deletes probe tasks of types[k] on the
// partition that has used fewer sequences until both have used the same,
// and returns the sequence the next task of either gets.
func (e *env) alignPartitions(types [2]string) uint64 {
	e.t.Helper()
	last := func(k int) uint64 {
		s, err := e.js.Stream(testCtx(e.t), e.names.PartitionStream(k))
		if err != nil {
			e.t.Fatal(err)
		}
		info, err := s.Info(testCtx(e.t))
		if err != nil {
			e.t.Fatal(err)
		}
		return info.State.LastSeq
	}
	for {
		l0, l1 := last(0), last(1)
		if l0 == l1 {
			return l0 + 1
		}
		k := 0
		if l1 < l0 {
			k = 1
		}
		seq := e.publish(spool.Normal, types[k], nil, nil)
		s, err := e.js.Stream(testCtx(e.t), e.names.PartitionStream(k))
		if err != nil {
			e.t.Fatal(err)
		}
		if err := s.DeleteMsg(testCtx(e.t), seq); err != nil {
			e.t.Fatal(err)
		}
	}
}

// lastDeadLetter reads the newest dead letter of type typ.
func (e *env) lastDeadLetter(typ string) *jetstream.RawStreamMsg {
	e.t.Helper()
	subject, err := e.names.DLQSubject(spool.Normal, typ)
	if err != nil {
		e.t.Fatal(err)
	}
	s, err := e.js.Stream(testCtx(e.t), e.names.DLQStream())
	if err != nil {
		e.t.Fatal(err)
	}
	m, err := s.GetLastMsgForSubject(testCtx(e.t), subject)
	if err != nil {
		e.t.Fatalf("reading the dead letter of %s: %v", typ, err)
	}
	return m
}
