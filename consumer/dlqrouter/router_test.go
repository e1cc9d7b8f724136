package dlqrouter_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/spoolq/spool/consumer/dlqrouter"
	spool "github.com/spoolq/spool/shared"
	"github.com/spoolq/spool/streams/streamstest"
)

func TestRouterLifecycle(t *testing.T) {
	t.Parallel()
	e := newRouterEnv(t)
	stopCtx := func() context.Context {
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		t.Cleanup(cancel)
		return ctx
	}

	t.Run("stop before start", func(t *testing.T) {
		r, err := dlqrouter.New(e.nc)
		if err != nil {
			t.Fatal(err)
		}
		if err := r.Stop(stopCtx()); err != nil {
			t.Errorf("Stop before Start: %v", err)
		}
		if err := r.Stop(stopCtx()); err != nil {
			t.Errorf("second Stop: %v", err)
		}
		select {
		case <-r.Stopped():
		default:
			t.Error("Stopped not closed after Stop")
		}
		if err := r.Start(routerCtx(t)); !errors.Is(err, dlqrouter.ErrStopped) {
			t.Errorf("Start after Stop = %v, want ErrStopped", err)
		}
	})

	t.Run("start twice, stop twice", func(t *testing.T) {
		r, err := dlqrouter.New(e.nc, dlqrouter.WithLogger(streamstest.Logger(t)))
		if err != nil {
			t.Fatal(err)
		}
		if err := r.Start(routerCtx(t)); err != nil {
			t.Fatal(err)
		}
		if err := r.Start(routerCtx(t)); err != nil {
			t.Errorf("second Start: %v", err)
		}
		if err := r.Stop(stopCtx()); err != nil {
			t.Errorf("Stop: %v", err)
		}
		if err := r.Stop(stopCtx()); err != nil {
			t.Errorf("second Stop: %v", err)
		}
		if err := r.Err(); err != nil {
			t.Errorf("Err after a stop = %v", err)
		}
	})

	t.Run("run until ctx ends", func(t *testing.T) {
		// A server of its own: a router stopped above may leave its pull
		// request waiting on the consumer, which would look like this
		// router pulling before it has started.
		e := newRouterEnv(t)
		r, err := dlqrouter.New(e.nc, dlqrouter.WithLogger(streamstest.Logger(t)))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() { done <- r.Run(ctx) }()
		// The router is pulling once the consumer sees a waiting request.
		routerWaitFor(t, 10*time.Second, "the router pulling", func() (bool, string) {
			c, err := e.js.Consumer(routerCtx(t), e.names.AdvisoryStream(), e.names.RouterConsumer())
			if err != nil {
				t.Fatal(err)
			}
			return c.CachedInfo().NumWaiting > 0, fmt.Sprintf("%d waiting", c.CachedInfo().NumWaiting)
		})
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run after ctx ended = %v, want nil", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("Run did not return after its ctx ended")
		}
	})

	t.Run("connection closed", func(t *testing.T) {
		nc, err := nats.Connect(e.url)
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		r, err := dlqrouter.New(nc, dlqrouter.WithLogger(streamstest.Logger(t)), dlqrouter.WithFetchWait(200*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		if err := r.Start(routerCtx(t)); err != nil {
			t.Fatal(err)
		}
		nc.Close()
		select {
		case <-r.Stopped():
		case <-time.After(10 * time.Second):
			t.Fatal("router still running after its connection closed")
		}
		if err := r.Err(); !errors.Is(err, nats.ErrConnectionClosed) {
			t.Errorf("Err = %v, want nats.ErrConnectionClosed", err)
		}
		if err := r.Stop(stopCtx()); err != nil {
			t.Errorf("Stop after the router ended: %v", err)
		}
	})

	t.Run("missing topology", func(t *testing.T) {
		r, err := dlqrouter.New(e.nc, dlqrouter.WithPrefix("elsewhere"))
		if err != nil {
			t.Fatal(err)
		}
		err = r.Start(routerCtx(t))
		if !errors.Is(err, jetstream.ErrStreamNotFound) {
			t.Errorf("Start without a topology = %v, want ErrStreamNotFound", err)
		}
	})

	t.Run("bad options", func(t *testing.T) {
		for name, opt := range map[string]dlqrouter.Option{
			"batch":      dlqrouter.WithBatch(0),
			"prefix":     dlqrouter.WithPrefix("a.b"),
			"worker":     dlqrouter.WithWorker(" "),
			"timeout":    dlqrouter.WithTimeout(time.Minute),
			"fetch wait": dlqrouter.WithFetchWait(time.Millisecond),
			"retry":      dlqrouter.WithRetryDelay(time.Hour),
		} {
			if _, err := dlqrouter.New(e.nc, opt); err == nil {
				t.Errorf("New with a bad %s option succeeded", name)
			}
		}
		if _, err := dlqrouter.New(nil); err == nil {
			t.Error("New(nil) succeeded")
		}
	})
}

// A router made WithEvents(false) dead-letters as always and publishes no
// dead event; with events on, the same run hears it.
func TestRouterWithEvents(t *testing.T) {
	t.Parallel()
	for _, on := range []bool{true, false} {
		t.Run(fmt.Sprintf("events=%v", on), func(t *testing.T) {
			t.Parallel()
			e := newRouterEnv(t)
			sub, err := e.nc.SubscribeSync(e.names.Prefix() + ".events.>")
			if err != nil {
				t.Fatal(err)
			}
			subject, err := e.names.TaskSubject(spool.Normal, "email.send")
			if err != nil {
				t.Fatal(err)
			}
			h := nats.Header{}
			h.Set(spool.HeaderTaskID, "crashed-1")
			e.publishTask(t, subject, h, nil)
			e.crashWorker(t, spool.Normal)
			e.startRouter(t, dlqrouter.WithEvents(on))
			routerWaitFor(t, 20*time.Second, "the dead letter and the advisory acknowledged", func() (bool, string) {
				if n := e.msgCount(t, e.names.DLQStream()); n != 1 {
					return false, fmt.Sprintf("%d dead letters", n)
				}
				return e.routerIdle(t)
			})
			// The router publishes the event before it acks the advisory,
			// on the subscription's own connection: after a flush, the
			// subscription holds it.
			if err := e.nc.Flush(); err != nil {
				t.Fatal(err)
			}
			got := streamstest.Held(sub)
			var want []string
			if on {
				want = []string{"spool.events.dead.normal.crashed-1.email.send"}
			}
			if !slices.Equal(got, want) {
				t.Errorf("events heard %q, want %q", got, want)
			}
		})
	}
}
