package remote_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/spoolq/spool/consumer"
	"github.com/spoolq/spool/consumer/remote"
	"github.com/spoolq/spool/streams/streamstest"
)

func TestRouteMatches(t *testing.T) {
	t.Parallel()
	cases := []struct {
		pattern, typ string
		want         bool
	}{
		{"email.send", "email.send", true},
		{"email.send", "email.send.bulk", false},
		{"email.send", "email", false},
		{"email.*", "email.send", true},
		{"email.*", "email.send.bulk", false},
		{"email.*", "email", false},
		{"*.send", "sms.send", true},
		{"email.>", "email.send.bulk", true},
		{"email.>", "email", false},
		{">", "anything.at.all", true},
		{"*", "one", true},
		{"*", "one.two", false},
	}
	for _, c := range cases {
		if got := (remote.Route{Pattern: c.pattern}).Matches(c.typ); got != c.want {
			t.Errorf("%q matches %q = %v, want %v", c.pattern, c.typ, got, c.want)
		}
	}
}

func TestRouteValidate(t *testing.T) {
	t.Parallel()
	cases := []struct {
		r       remote.Route
		wantErr string
	}{
		{remote.Route{Pattern: "a.>", Subject: "h.{type}", Concurrency: 3, Timeout: time.Second}, ""},
		{remote.Route{Pattern: "", Subject: "h"}, "type pattern"},
		{remote.Route{Pattern: "a.>.b", Subject: "h"}, "type pattern"},
		{remote.Route{Pattern: "a b", Subject: "h"}, "type pattern"},
		{remote.Route{Pattern: "a", Subject: ""}, "subject"},
		{remote.Route{Pattern: "a", Subject: "h.>"}, "subject"},
		{remote.Route{Pattern: "a", Subject: "h", Concurrency: -1}, "concurrency"},
		{remote.Route{Pattern: "a", Subject: "h", Timeout: -time.Second}, "timeout"},
	}
	for _, c := range cases {
		err := c.r.Validate()
		if c.wantErr == "" && err != nil || c.wantErr != "" && (err == nil || !strings.HasPrefix(err.Error(), c.wantErr)) {
			t.Errorf("%+v: %v, want %q", c.r, err, c.wantErr)
		}
	}
	url := remoteServer(t)
	nc := remoteConnect(t, url)
	if _, err := remote.NewRoutes(nc, []remote.Route{{Pattern: "a", Subject: "h"}, {Pattern: "a", Subject: "g"}}, nil); !errors.Is(err, consumer.ErrInvalidOption) {
		t.Errorf("a pattern twice: %v", err)
	}
	if _, err := remote.NewRoutes(nil, nil, nil); !errors.Is(err, consumer.ErrInvalidOption) {
		t.Errorf("nil connection: %v", err)
	}
}

// The first matching route serves a type; {type} names the subject; the
// concurrency cap holds requests back; the route timeout bounds the wait;
// the counters add up.
func TestRoutesServe(t *testing.T) {
	t.Parallel()
	url := remoteServer(t)
	nc := remoteConnect(t, url)
	var inFlight, most atomic.Int64
	release := make(chan struct{})
	remoteRespond(t, url, "h.>", func(m *nats.Msg) {
		go respondRoute(m, release, &inFlight, &most) // a subscription calls back one message at a time
	})
	rs, err := remote.NewRoutes(nc, []remote.Route{
		{Pattern: "slow", Subject: "h.slow", Timeout: 50 * time.Millisecond},
		{Pattern: "capped", Subject: "h.capped", Concurrency: 2},
		{Pattern: "a.*", Subject: "h.{type}"},
		{Pattern: ">", Subject: "nobody.home"},
	}, remoteLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	ctx := remoteCtx(t, 20*time.Second)
	task := func(typ string) *consumer.Task { tk := remoteTask(); tk.Type = typ; return tk }

	if out, err := rs.ProcessTask(ctx, task("a.b")); err != nil || string(out) != "h.a.b" {
		t.Errorf("a.b: %q, %v", out, err)
	}
	if _, err := rs.ProcessTask(ctx, task("slow")); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("slow: %v, want the route timeout", err)
	}
	if _, err := rs.ProcessTask(ctx, task("x.y")); !errors.Is(err, remote.ErrNoResponders) {
		t.Errorf("x.y: %v, want no responders", err)
	}

	errs := make(chan error, 5)
	for range 5 {
		go func() { _, err := rs.ProcessTask(ctx, task("capped")); errs <- err }()
	}
	streamstest.WaitFor(t, 10*time.Second, func() error {
		if st := rs.Stats()[1]; st.InFlight != 2 || inFlight.Load() != 2 {
			return errors.New("want 2 capped requests in flight")
		}
		return nil
	})
	close(release)
	for range 5 {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	if most.Load() != 2 {
		t.Errorf("at most %d capped requests ran at once, want 2", most.Load())
	}
	st := rs.Stats()
	if st[0].Calls != 1 || st[0].Timeouts != 1 || st[1].Calls != 5 || st[1].Completed != 5 || st[1].InFlight != 0 ||
		st[2].Completed != 1 || st[3].NoResponders != 1 || st[0].TimeoutNS != int64(50*time.Millisecond) || st[1].Concurrency != 2 {
		t.Errorf("stats %+v", st)
	}

	// Fallback: the mux's own handlers win; routes serve the rest; a type
	// neither serves is no_handler.
	mux := consumer.NewMux()
	mux.HandleFunc("a.local", func(context.Context, *consumer.Task) ([]byte, error) { return []byte("local"), nil })
	noRoutes, err := remote.NewRoutes(nc, []remote.Route{{Pattern: "a.*", Subject: "h.{type}"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	var wrapped atomic.Int64
	mw := func(next consumer.Handler) consumer.Handler {
		return consumer.HandlerFunc(func(ctx context.Context, t *consumer.Task) ([]byte, error) {
			wrapped.Add(1)
			return next.ProcessTask(ctx, t)
		})
	}
	h := remote.Fallback(mux, noRoutes, mw)
	if out, err := h.ProcessTask(ctx, task("a.local")); err != nil || string(out) != "local" {
		t.Errorf("a.local: %q, %v", out, err)
	}
	if out, err := h.ProcessTask(ctx, task("a.other")); err != nil || string(out) != "h.a.other" || wrapped.Load() != 1 {
		t.Errorf("a.other: %q, %v, middleware ran %d times", out, err, wrapped.Load())
	}
	if _, err := h.ProcessTask(ctx, task("b")); !errors.Is(err, consumer.ErrNoHandler) || !consumer.IsPermanent(err) {
		t.Errorf("b: %v", err)
	}
}

// respondRoute answers with the subject; h.slow and h.capped wait for
// release, h.capped counting how many wait at once.
func respondRoute(m *nats.Msg, release chan struct{}, inFlight, most *atomic.Int64) {
	switch m.Subject {
	case "h.slow":
		<-release
	case "h.capped":
		n := inFlight.Add(1)
		for {
			old := most.Load()
			if n <= old || most.CompareAndSwap(old, n) {
				break
			}
		}
		<-release
		inFlight.Add(-1)
	}
	_ = m.Respond([]byte(m.Subject))
}
