package admin_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	spool "github.com/spoolq/spool/shared"
	"github.com/spoolq/spool/shared/limits"
	"github.com/spoolq/spool/streams"
	"github.com/spoolq/spool/streams/admin"
	"github.com/spoolq/spool/streams/streamstest"
)

func newClient(t *testing.T, e *streamstest.Env, opts ...admin.Option) *admin.Client {
	t.Helper()
	c, err := admin.New(e.NC, append([]admin.Option{admin.WithNames(e.Names), admin.WithLogger(streamstest.Logger(t))}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestNewValidatesOptions(t *testing.T) {
	t.Parallel()
	nc := &nats.Conn{}
	for name, opt := range map[string]admin.Option{
		"prefix":     admin.WithPrefix("bad prefix"),
		"names":      admin.WithNames(spool.Names{}),
		"timeout":    admin.WithTimeout(0),
		"fleet wait": admin.WithFleetWait(-time.Second),
	} {
		if _, err := admin.New(nc, opt); !errors.Is(err, admin.ErrInvalidOption) {
			t.Errorf("%s: err %v, want ErrInvalidOption", name, err)
		}
	}
	if _, err := admin.New(nil); err == nil {
		t.Error("nil connection accepted")
	}
}

func TestStatus(t *testing.T) {
	t.Parallel()
	e := streamstest.Start(t, streams.Settings{Consumers: streams.ConsumersByPriority})
	c := newClient(t, e)
	ctx := streamstest.Context(t)
	for range 3 {
		if _, err := e.JS.Publish(ctx, "spool.tasks.low.status.test", []byte("{}")); err != nil {
			t.Fatal(err)
		}
	}
	dead := nats.NewMsg("spool.dlq.high.status.dead")
	dead.Header.Set(spool.HeaderReason, string(spool.ReasonError))
	if _, err := e.JS.PublishMsg(ctx, dead); err != nil {
		t.Fatal(err)
	}
	sched := nats.NewMsg("spool.sched.status-scheduled")
	sched.Header.Set("Nats-Schedule", "@at "+time.Now().Add(time.Hour).UTC().Format(time.RFC3339Nano))
	sched.Header.Set("Nats-Schedule-Target", "spool.tasks.normal.status.later")
	if _, err := e.JS.PublishMsg(ctx, sched); err != nil {
		t.Fatal(err)
	}
	if err := c.SetLimit(ctx, limits.Rule{Type: "status.later", Concurrency: 3}); err != nil {
		t.Fatal(err)
	}
	// A consumer's pending count follows the stream's stores a moment
	// later (the server signals consumers from a goroutine of its own).
	var st admin.Status
	streamstest.WaitFor(t, 10*time.Second, func() error {
		var err error
		if st, err = c.Status(ctx); err != nil {
			t.Fatal(err)
		}
		if len(st.Priorities) == len(spool.Priorities) && st.Priorities[3].Pending != 3 {
			return fmt.Errorf("low shows %d pending", st.Priorities[3].Pending)
		}
		return nil
	})
	if len(st.Limits) != 1 || st.Limits[0].Rule.Concurrency != 3 || st.Limits[0].Running != 0 {
		t.Errorf("limits in the status %+v, want the one rule, nothing running", st.Limits)
	}
	if len(st.Priorities) != len(spool.Priorities) {
		t.Fatalf("priorities %+v", st.Priorities)
	}
	for i, p := range st.Priorities {
		want := uint64(0)
		if p.Priority == spool.Low {
			want = 3
		}
		if p.Priority != spool.Priorities[i] || p.Pending != want || p.InFlight != 0 {
			t.Errorf("priority %d: %+v", i, p)
		}
		if (p.OldestWait > 0) != (want > 0) {
			t.Errorf("%s: oldest wait %s with %d pending", p.Priority, p.OldestWait, p.Pending)
		}
	}
	if st.DeadLetters != 1 || st.Scheduled != 1 || st.StoreBytes == 0 {
		t.Errorf("status %+v", st)
	}
}

func TestNotConnected(t *testing.T) {
	t.Parallel()
	e := streamstest.Start(t, streams.Settings{})
	nc := e.Connect(t)
	c, err := admin.New(nc, admin.WithNames(e.Names))
	if err != nil {
		t.Fatal(err)
	}
	nc.Close()
	ctx := streamstest.Context(t)
	if _, err := c.Status(ctx); !errors.Is(err, admin.ErrNotConnected) {
		t.Errorf("Status: %v", err)
	}
	if _, err := c.Fleet(ctx); !errors.Is(err, admin.ErrNotConnected) {
		t.Errorf("Fleet: %v", err)
	}
	if _, err := c.Overview(ctx); !errors.Is(err, admin.ErrNotConnected) {
		t.Errorf("Overview: %v", err)
	}
}
