package consumer_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/spoolq/spool/consumer"
	spool "github.com/spoolq/spool/shared"
	"github.com/spoolq/spool/streams"
	"github.com/spoolq/spool/streams/streamstest"
)

// A worker made WithEvents(false) publishes no event of the tasks it runs,
// and still writes their results; the same run with events on shows the
// subscription hears them.
func TestWithEvents(t *testing.T) {
	t.Parallel()
	for _, on := range []bool{true, false} {
		t.Run(fmt.Sprintf("events=%v", on), func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, streams.Settings{})
			sub, err := e.nc.SubscribeSync(e.names.Prefix() + ".events.>")
			if err != nil {
				t.Fatal(err)
			}
			if err := e.nc.Flush(); err != nil {
				t.Fatal(err)
			}
			mux := consumer.NewMux()
			mux.HandleFunc("ok", func(context.Context, *consumer.Task) ([]byte, error) { return []byte(`1`), nil })
			mux.HandleFunc("bad", func(context.Context, *consumer.Task) ([]byte, error) {
				return nil, consumer.Permanent(errors.New("refused"))
			})
			wnc := e.connect()
			w, err := consumer.New(wnc, mux, consumer.WithLogger(testLogger(t)), consumer.WithWorkerName("events"),
				consumer.WithPolling(100*time.Millisecond, 50*time.Millisecond), consumer.WithEvents(on))
			if err != nil {
				t.Fatal(err)
			}
			if err := w.Start(testCtx(t)); err != nil {
				t.Fatal(err)
			}
			e.publishID(spool.Normal, "ok", "ok-1", nil, nil)
			e.publishID(spool.Normal, "bad", "bad-1", nil, nil)
			e.waitResult("ok-1", spool.StateCompleted, 10*time.Second)
			e.waitResult("bad-1", spool.StateDead, 10*time.Second)
			// Stop settles every completion (its ack and event included);
			// the flushes then make the server hand the subscription
			// whatever the worker published.
			if err := w.Stop(testCtx(t)); err != nil {
				t.Fatal(err)
			}
			if err := wnc.Flush(); err != nil {
				t.Fatal(err)
			}
			if err := e.nc.Flush(); err != nil {
				t.Fatal(err)
			}
			got := streamstest.Held(sub)
			var want []string
			if on {
				want = []string{
					"spool.events.completed.normal.ok-1.ok",
					"spool.events.dead.normal.bad-1.bad",
					"spool.events.started.normal.bad-1.bad",
					"spool.events.started.normal.ok-1.ok",
				}
			}
			slices.Sort(got)
			if !slices.Equal(got, want) {
				t.Errorf("events heard:\n%q\nwant:\n%q", got, want)
			}
		})
	}
}
