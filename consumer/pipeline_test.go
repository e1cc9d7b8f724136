package consumer_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/spoolq/spool/consumer"
	spool "github.com/spoolq/spool/shared"
	"github.com/spoolq/spool/streams"
	"github.com/spoolq/spool/streams/streamstest"
)

// The completion pipeline acks a task only once its completed result is
// stored. Whether the worker is stopped or its connection closes while
// completions are in flight, every task gone from the (work-queue) stream
// has its completed result document, and a graceful stop leaves no
// completed task unacked.
func TestPipelineAcksOnlyStoredResults(t *testing.T) {
	t.Parallel()
	for _, how := range []string{"stop", "close"} {
		t.Run(how, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, streams.Settings{})
			const n = 600
			subject, err := e.names.TaskSubject(spool.Normal, "job")
			if err != nil {
				t.Fatal(err)
			}
			futures := make(map[string]jetstream.PubAckFuture, n)
			for i := range n {
				id := fmt.Sprintf("pipe-%d", i)
				f, err := e.js.PublishMsgAsync(&nats.Msg{Subject: subject, Header: nats.Header{spool.HeaderTaskID: {id}}})
				if err != nil {
					t.Fatal(err)
				}
				futures[id] = f
			}
			seqs := make(map[string]uint64, n)
			for id, f := range futures {
				select {
				case ack := <-f.Ok():
					seqs[id] = ack.Sequence
				case err := <-f.Err():
					t.Fatal(err)
				}
			}

			nc := e.connect()
			mux := consumer.NewMux()
			mux.HandleFunc("job", func(ctx context.Context, task *consumer.Task) ([]byte, error) {
				return []byte(`{"ok":true}`), nil
			})
			w, err := consumer.New(nc, mux, consumer.WithLogger(testLogger(t)), consumer.WithConcurrency(32, 32),
				consumer.WithPolling(100*time.Millisecond, 50*time.Millisecond),
				consumer.WithIOTimeout(2*time.Second)) // bounds the wait for writes a closed connection never answers
			if err != nil {
				t.Fatal(err)
			}
			if err := w.Start(testCtx(t)); err != nil {
				t.Fatal(err)
			}
			streamstest.WaitFor(t, 30*time.Second, func() error {
				if w.Stats().Total().Completed < 50 {
					return errors.New("some tasks completed")
				}
				return nil
			})
			if how == "close" {
				nc.Close()
			}
			if err := w.Stop(testCtx(t)); err != nil {
				t.Fatal(err)
			}
			completed := w.Stats().Total().Completed

			tasks, err := e.js.Stream(testCtx(t), e.names.TaskStream())
			if err != nil {
				t.Fatal(err)
			}
			acked := 0
			for id, seq := range seqs {
				_, err := tasks.GetMsg(testCtx(t), seq)
				if err == nil {
					continue // still queued (or its ack is still on its way)
				}
				if !errors.Is(err, jetstream.ErrMsgNotFound) {
					t.Fatal(err)
				}
				acked++
				if doc, ok := e.result(id); !ok || doc.State != spool.StateCompleted {
					t.Errorf("task %s is acked but its result is %+v (found %v)", id, doc, ok)
				}
			}
			t.Logf("%s: %d of %d tasks acked, %d completed", how, acked, n, completed)
			if acked == 0 {
				t.Error("no task was acked")
			}
			if how == "stop" {
				// Every completion counted was acked before Stop returned:
				// wait for the server to have applied the acks.
				streamstest.WaitFor(t, 10*time.Second, func() error {
					if uint64(n)-e.taskMsgs() < completed {
						return errors.New("acks applied")
					}
					return nil
				})
			}
		})
	}
}

// A slot is free once its handler returns: the result write and then the
// ack follow behind in the completion window. With one slot and the
// results bucket gone (every result write finds no stream and is retried),
// the worker still runs every task, none acked; once the bucket is back,
// every result is stored and every task acked.
func TestSlotFreeBeforeSettlement(t *testing.T) {
	t.Parallel()
	e := newEnv(t, streams.Settings{})
	var ran log[string]
	mux := consumer.NewMux()
	mux.HandleFunc("job", func(ctx context.Context, task *consumer.Task) ([]byte, error) {
		ran.add(task.ID)
		return []byte(`"done"`), nil
	})
	w := e.worker(mux, consumer.WithConcurrency(1, 1))
	if err := e.js.DeleteKeyValue(testCtx(t), e.names.ResultsBucket()); err != nil {
		t.Fatal(err)
	}
	// More than a window of the size it had when a slot waited for its
	// result's round trip.
	const n = 200
	e.publishMany(spool.Normal, "job", n, nil)
	streamstest.WaitFor(t, 60*time.Second, func() error {
		if got := ran.len(); got < n {
			return fmt.Errorf("%d of %d tasks ran in the one slot", got, n)
		}
		return nil
	})
	if left := e.taskMsgs(); left != n {
		t.Fatalf("%d tasks acked before their result could be stored", n-left)
	}
	if c := w.Stats().Total().Completed; c != 0 {
		t.Fatalf("%d tasks counted completed before their result could be stored", c)
	}
	if err := streams.Provision(testCtx(t), e.js, e.topo, testLogger(t)); err != nil {
		t.Fatal(err)
	}
	streamstest.WaitFor(t, 60*time.Second, func() error {
		if left := e.taskMsgs(); left != 0 {
			return fmt.Errorf("%d tasks unacked", left)
		}
		return nil
	})
	for _, id := range ran.snapshot() {
		if doc, ok := e.result(id); !ok || doc.State != spool.StateCompleted {
			t.Errorf("task %s is acked but its result is %+v (found %v)", id, doc, ok)
		}
	}
	if c := w.Stats().Total(); c.Completed != n || c.Retried != 0 {
		t.Errorf("completed %d, retried %d: want %d completed, none run again", c.Completed, c.Retried, n)
	}
}

// A worker that dies between its handlers' return and their acks (its
// connection gone while every completion waits in the window, the results
// bucket missing) loses nothing and leaves no task acked without its
// stored result: the tasks come back after AckWait and complete on
// another worker, each with its completed document.
func TestKillBetweenHandlerAndAck(t *testing.T) {
	t.Parallel()
	e := newEnv(t, streams.Settings{AckWait: 2 * time.Second})
	var ran log[string]
	mux := consumer.NewMux()
	mux.HandleFunc("job", func(ctx context.Context, task *consumer.Task) ([]byte, error) {
		ran.add(task.ID)
		return []byte(`"done"`), nil
	})
	nc := e.connect()
	first, err := consumer.New(nc, mux, consumer.WithLogger(testLogger(t)), consumer.WithConcurrency(4, 4),
		consumer.WithPolling(100*time.Millisecond, 50*time.Millisecond), consumer.WithIOTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if err := first.Start(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	if err := e.js.DeleteKeyValue(testCtx(t), e.names.ResultsBucket()); err != nil {
		t.Fatal(err)
	}
	const n = 50
	e.publishMany(spool.Normal, "job", n, nil)
	streamstest.WaitFor(t, 60*time.Second, func() error {
		if got := ran.len(); got < n {
			return fmt.Errorf("%d of %d tasks ran", got, n)
		}
		return nil
	})
	// The kill: nothing more leaves the first worker.
	nc.Close()
	if err := first.Stop(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	if left := e.taskMsgs(); left != n {
		t.Fatalf("%d tasks acked without a stored result", n-left)
	}
	if err := streams.Provision(testCtx(t), e.js, e.topo, testLogger(t)); err != nil {
		t.Fatal(err)
	}
	second := e.worker(mux, consumer.WithConcurrency(4, 4))
	streamstest.WaitFor(t, 60*time.Second, func() error {
		if left := e.taskMsgs(); left != 0 {
			return fmt.Errorf("%d tasks unacked", left)
		}
		return nil
	})
	ids := map[string]bool{}
	for _, id := range ran.snapshot() {
		ids[id] = true
	}
	if len(ids) != n {
		t.Fatalf("%d distinct tasks ran, want %d", len(ids), n)
	}
	for id := range ids {
		if doc, ok := e.result(id); !ok || doc.State != spool.StateCompleted {
			t.Errorf("task %s is acked but its result is %+v (found %v)", id, doc, ok)
		}
	}
	if c := second.Stats().Total().Completed; c != n {
		t.Errorf("the second worker completed %d, want all %d again", c, n)
	}
}
