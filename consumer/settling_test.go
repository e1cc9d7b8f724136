package consumer_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/spoolq/spool/consumer"
	spool "github.com/spoolq/spool/shared"
	"github.com/spoolq/spool/streams"
	"github.com/spoolq/spool/streams/streamstest"
)

// Dead letters from the worker carry the documented headers, the original
// is removed, and the dead result names the reason.
func TestDeadLetterInProcess(t *testing.T) {
	t.Parallel()
	e := newEnv(t, streams.Settings{Consumers: streams.ConsumersByPriority})
	mux := consumer.NewMux()
	mux.HandleFunc("fail", func(ctx context.Context, task *consumer.Task) ([]byte, error) {
		return nil, errors.New("always fails")
	})
	mux.HandleFunc("perm", func(ctx context.Context, task *consumer.Task) ([]byte, error) {
		return nil, consumer.Permanent(errors.New("card declined"))
	})
	mux.HandleFunc("boom", func(ctx context.Context, task *consumer.Task) ([]byte, error) {
		panic("kaboom")
	})
	e.worker(mux, consumer.WithRetry(10*time.Millisecond, 10*time.Millisecond, 1))
	dlq, err := e.js.Stream(testCtx(t), e.names.DLQStream())
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, typ, id string
		hdr           map[string]string
		wantReason    spool.Reason
		wantAttempts  int
		wantErr       string
	}{
		{"last attempt fails", "fail", "d-fail", nil, spool.ReasonError, 2, "always fails"},
		{"permanent", "perm", "d-perm", nil, spool.ReasonPermanent, 1, "card declined"},
		{"panic on the last attempt", "boom", "d-boom", map[string]string{spool.HeaderMaxRetries: "0"}, spool.ReasonPanic, 1, "kaboom"},
		{"no handler", "nobody.home", "d-none", nil, spool.ReasonNoHandler, 1, "no handler"},
		{"bad header", "fail", "d-bad", map[string]string{spool.HeaderTimeout: "soon"}, spool.ReasonBadInput, 1, "Spool-Timeout"},
		{"bad id", "fail", "bad id!", nil, spool.ReasonBadInput, 1, "invalid task id"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			hdr := map[string]string{"X-Tenant": "acme", spool.HeaderTraceParent: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}
			for k, v := range tc.hdr {
				hdr[k] = v
			}
			seq := e.publishID(spool.High, tc.typ, tc.id, []byte("payload"), hdr)
			subject := "spool.dlq.high." + tc.typ
			var got *jetstream.RawStreamMsg
			streamstest.WaitFor(t, 20*time.Second, func() error {
				m, err := dlq.GetLastMsgForSubject(testCtx(t), subject)
				if err != nil || m.Header.Get(spool.HeaderOriginalSeq) != fmt.Sprint(seq) {
					return errors.New("dead letter on " + subject)
				}
				got = m
				return nil
			})
			h := got.Header
			checks := map[string]string{
				spool.HeaderReason:          string(tc.wantReason),
				spool.HeaderAttempts:        fmt.Sprint(tc.wantAttempts),
				spool.HeaderOriginalSubject: "spool.tasks.high." + tc.typ,
				spool.HeaderOriginalSeq:     fmt.Sprint(seq),
				spool.HeaderMsgID:           fmt.Sprintf("dlq-SPOOL_TASKS-%d", seq),
				spool.HeaderTaskID:          tc.id,
				"X-Tenant":                  "acme",
				spool.HeaderTraceParent:     hdr[spool.HeaderTraceParent],
			}
			for k, want := range checks {
				if v := h.Get(k); v != want {
					t.Errorf("header %s = %q, want %q", k, v, want)
				}
			}
			if !strings.Contains(h.Get(spool.HeaderError), tc.wantErr) {
				t.Errorf("Spool-Error %q does not mention %q", h.Get(spool.HeaderError), tc.wantErr)
			}
			if _, err := time.Parse(time.RFC3339Nano, h.Get(spool.HeaderFailedAt)); err != nil {
				t.Errorf("Spool-Failed-At: %v", err)
			}
			// A direct get adds Nats-Stream/-Sequence/-Subject/-Time-Stamp
			// of the DLQ copy itself: they must name the DLQ, not the task.
			if h.Get("Nats-Stream") != e.names.DLQStream() || h.Get("Nats-Subject") != subject {
				t.Errorf("dead letter carries the task's internal headers: %v", h)
			}
			if string(got.Data) != "payload" {
				t.Errorf("payload %q", got.Data)
			}
			key := tc.id
			if spool.ValidateID(key) != nil {
				key = fmt.Sprint(seq)
			}
			doc := e.waitResult(key, spool.StateDead, 10*time.Second)
			if doc.Reason != tc.wantReason || doc.Attempts != tc.wantAttempts {
				t.Errorf("dead document %+v", doc)
			}
			tasks, err := e.js.Stream(testCtx(t), e.names.TaskStream())
			if err != nil {
				t.Fatal(err)
			}
			streamstest.WaitFor(t, 10*time.Second, func() error {
				_, err := tasks.GetMsg(testCtx(t), seq)
				if !errors.Is(err, jetstream.ErrMsgNotFound) {
					return errors.New("original removed")
				}
				return nil
			})
		})
	}
}

// A completed or dead task releases its unique key, but not a key that a
// newer task holds.
func TestUniqueKeyReleased(t *testing.T) {
	t.Parallel()
	e := newEnv(t, streams.Settings{})
	mux := consumer.NewMux()
	mux.HandleFunc("ok", func(ctx context.Context, task *consumer.Task) ([]byte, error) { return nil, nil })
	mux.HandleFunc("perm", func(ctx context.Context, task *consumer.Task) ([]byte, error) {
		return nil, consumer.Permanent(errors.New("no"))
	})
	e.worker(mux)
	kv, err := e.js.KeyValue(testCtx(t), e.names.UniqueBucket())
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, typ, id, key, holder string
		state                      spool.State
		wantKept                   bool
	}{
		{"completed releases", "ok", "u-1", "report:2026-11", "u-1", spool.StateCompleted, false},
		{"dead releases", "perm", "u-2", "report:2026-12", "u-2", spool.StateDead, false},
		{"held by another task", "ok", "u-3", "report:2027-01", "u-other", spool.StateCompleted, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := kv.Create(testCtx(t), spool.UniqueKVKey(tc.key), []byte(tc.holder), jetstream.KeyTTL(time.Hour)); err != nil {
				t.Fatal(err)
			}
			e.publishID(spool.Normal, tc.typ, tc.id, nil, map[string]string{
				spool.HeaderUniqueKey: tc.key, spool.HeaderUniqueTTL: "1h",
			})
			e.waitResult(tc.id, tc.state, 10*time.Second)
			// The key is released before the task is removed.
			streamstest.WaitFor(t, 10*time.Second, func() error {
				if e.taskMsgs() != 0 {
					return errors.New("task removed")
				}
				return nil
			})
			entry, err := kv.Get(testCtx(t), spool.UniqueKVKey(tc.key))
			switch {
			case tc.wantKept && (err != nil || string(entry.Value()) != tc.holder):
				t.Errorf("key of another task: %v, %v", entry, err)
			case !tc.wantKept && !errors.Is(err, jetstream.ErrKeyNotFound):
				t.Errorf("key not released: %v", err)
			}
		})
	}
}
