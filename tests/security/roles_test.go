package security_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	spool "github.com/spoolq/spool/shared"
	"github.com/spoolq/spool/streams"
)

var names = spool.DefaultNames()

// fixture is one provisioned auth server shared by the steps of a test, with
// an admin connection to seed state.
type fixture struct {
	srv   authServer
	admin *client
}

// step is one operation attempted as one role.
type step struct {
	name string
	user string
	// do performs the operation and checks its outcome.
	do func(ctx context.Context, t *testing.T, f *fixture, c *client) error
	// denied is empty when the role may do it. Otherwise the server must
	// report a permissions violation containing denied, e.g.
	// `Publish to "spool.dlq.high.x"`.
	denied string
	// fireAndForget marks denied operations that return no error of their
	// own (a core publish or subscribe); request-reply operations must fail.
	fireAndForget bool
}

func run(t *testing.T, f *fixture, steps []step) {
	t.Helper()
	for _, st := range steps {
		t.Run(st.user+"/"+st.name, func(t *testing.T) {
			t.Parallel()
			c := f.srv.connect(t, st.user)
			ctx := testContext(t)
			if st.denied == "" {
				if err := st.do(ctx, t, f, c); err != nil {
					t.Fatalf("%s should be allowed to %s: %v", st.user, st.name, err)
				}
				c.noViolation(t)
				return
			}
			// A denied request gets no reply: it waits until cancelled
			// once the violation has been seen.
			opCtx, cancel := context.WithCancel(ctx)
			defer cancel()
			done := make(chan error, 1)
			go func() { done <- st.do(opCtx, t, f, c) }()
			violation := c.waitViolation(t, st.denied)
			cancel()
			err := <-done
			t.Logf("%s: %v; operation returned %v", st.user, violation, err)
			if !st.fireAndForget && err == nil {
				t.Fatalf("%s: %s succeeded despite %v", st.user, st.name, violation)
			}
		})
	}
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	srv := startAuth(t, true)
	return &fixture{srv: srv, admin: srv.connect(t, "spool-admin")}
}

// seedTask publishes a task as admin and returns its stream sequence.
func (f *fixture) seedTask(ctx context.Context, subject string, body []byte) (uint64, error) {
	ack, err := f.admin.js.Publish(ctx, subject, body)
	if err != nil {
		return 0, fmt.Errorf("admin publishing %s: %w", subject, err)
	}
	return ack.Sequence, nil
}

func wantStream(ack *jetstream.PubAck, stream string) error {
	if ack.Stream != stream {
		return fmt.Errorf("stored in %q, want %q", ack.Stream, stream)
	}
	return nil
}

// pauseType puts a type pause, an operator's action.
func pauseType(ctx context.Context, t *testing.T, f *fixture, c *client) error {
	_, err := c.js.Publish(ctx, "$KV."+names.PausedBucket()+".report", []byte(`{"type":"report","by":"intruder"}`))
	return err
}

// setCronSchedule publishes a periodic schedule, an operator's action.
func setCronSchedule(ctx context.Context, t *testing.T, f *fixture, c *client) error {
	m := nats.NewMsg("spool.cron.nightly")
	m.Header.Set(spool.HeaderSchedule, "@every 1h")
	m.Header.Set(spool.HeaderScheduleTarget, "spool.tasks.low.report")
	_, err := c.js.PublishMsg(ctx, m)
	return err
}

func adminPutResult(ctx context.Context, f *fixture, key string, doc []byte) error {
	kv, err := f.admin.js.KeyValue(ctx, names.ResultsBucket())
	if err != nil {
		return err
	}
	if _, err := kv.Put(ctx, key, doc); err != nil {
		return fmt.Errorf("admin writing result %q: %w", key, err)
	}
	return nil
}

// TestHandlerRole: a remote handler answers requests (TestConsumerRole
// shows it) and can do nothing else.
func TestHandlerRole(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	const h = "spool-handler"
	run(t, f, []step{
		{name: "answer a request", user: h, do: func(ctx context.Context, t *testing.T, f *fixture, c *client) error {
			sub, err := c.nc.Subscribe("spool.remote.pdf.render", func(m *nats.Msg) {
				if err := m.Respond([]byte("rendered")); err != nil {
					t.Errorf("responding: %v", err)
				}
			})
			if err != nil {
				return err
			}
			defer func() {
				if err := sub.Unsubscribe(); err != nil {
					t.Errorf("unsubscribing: %v", err)
				}
			}()
			c.noViolation(t)
			reply, err := f.admin.nc.RequestWithContext(ctx, "spool.remote.pdf.render", nil)
			if err != nil {
				return err
			}
			if string(reply.Data) != "rendered" {
				return fmt.Errorf("reply %q", reply.Data)
			}
			return nil
		}},
		{name: "listen on reply inboxes", user: h, denied: `Subscription to "_INBOX.>"`, fireAndForget: true,
			do: func(ctx context.Context, t *testing.T, f *fixture, c *client) error {
				_, err := c.nc.Subscribe("_INBOX.>", func(*nats.Msg) {})
				return err
			}},
		{name: "publish a task", user: h, denied: `Publish to "spool.tasks.high.x"`, fireAndForget: true,
			do: func(ctx context.Context, t *testing.T, f *fixture, c *client) error {
				return c.nc.Publish("spool.tasks.high.x", nil)
			}},
		{name: "use the JetStream API", user: h, denied: `Publish to "$JS.API.INFO"`, fireAndForget: true,
			do: func(ctx context.Context, t *testing.T, f *fixture, c *client) error {
				return c.nc.PublishRequest("$JS.API.INFO", "_INBOX.x", nil)
			}},
		{name: "listen on task subjects", user: h, denied: `Subscription to "spool.tasks.>"`, fireAndForget: true,
			do: func(ctx context.Context, t *testing.T, f *fixture, c *client) error {
				_, err := c.nc.Subscribe("spool.tasks.>", func(*nats.Msg) {})
				return err
			}},
	})
}

// TestAdminRole provisions (in startAuth), purges, deletes and provisions
// again as spool-admin.
func TestAdminRole(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := testContext(t)
	js := f.admin.js
	for i := range 3 {
		if _, err := js.Publish(ctx, fmt.Sprintf("spool.dlq.normal.t%d", i), nil); err != nil {
			t.Fatalf("admin publishing a dead letter: %v", err)
		}
	}
	dlq, err := js.Stream(ctx, names.DLQStream())
	if err != nil {
		t.Fatal(err)
	}
	// Replay: read a dead letter and enqueue it again.
	dead, err := dlq.GetMsg(ctx, 1)
	if err != nil {
		t.Fatalf("admin reading the DLQ: %v", err)
	}
	if _, err := js.Publish(ctx, "spool.tasks.normal.t0", dead.Data); err != nil {
		t.Fatalf("admin replaying: %v", err)
	}
	if err := dlq.Purge(ctx); err != nil {
		t.Fatalf("admin purging the DLQ: %v", err)
	}
	info, err := dlq.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != 0 {
		t.Fatalf("DLQ holds %d messages after purge", info.State.Msgs)
	}
	if err := js.DeleteStream(ctx, names.AdvisoryStream()); err != nil {
		t.Fatalf("admin deleting a stream: %v", err)
	}
	if _, err := js.Stream(ctx, names.AdvisoryStream()); !errors.Is(err, jetstream.ErrStreamNotFound) {
		t.Fatalf("advisory stream after delete: %v, want ErrStreamNotFound", err)
	}
	if err := streams.Provision(ctx, js, topology(t), testLogger(t)); err != nil {
		t.Fatalf("admin provisioning again: %v", err)
	}
	if _, err := js.Consumer(ctx, names.AdvisoryStream(), names.RouterConsumer()); err != nil {
		t.Fatalf("router consumer after re-provisioning: %v", err)
	}
	f.admin.noViolation(t)
}

// TestRefused: without the right credentials nobody gets in.
func TestRefused(t *testing.T) {
	t.Parallel()
	srv := startAuth(t, false)
	for _, tt := range []struct {
		name string
		opts []nats.Option
	}{
		{"anonymous", nil},
		{"wrong password", []nats.Option{nats.UserInfo("spool-admin", srv.passwords["spool-producer"])}},
		{"unknown user", []nats.Option{nats.UserInfo("spool", srv.passwords["spool-admin"])}},
		{"token instead of a user", []nats.Option{nats.Token(srv.passwords["spool-admin"])}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			nc, err := nats.Connect(srv.url, append(tt.opts, nats.NoReconnect())...)
			if err == nil {
				nc.Close()
				t.Fatal("connected")
			}
			if !errors.Is(err, nats.ErrAuthorization) {
				t.Fatalf("error %v, want %v", err, nats.ErrAuthorization)
			}
		})
	}
}
