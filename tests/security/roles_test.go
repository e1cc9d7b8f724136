package security_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"

	"github.com/spoolq/spool/consumer"
	"github.com/spoolq/spool/consumer/service"
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

func scheduleMsg(id, target string) *nats.Msg {
	m := nats.NewMsg("spool.sched." + id)
	m.Header.Set(spool.HeaderTaskID, id)
	m.Header.Set(spool.HeaderSchedule, "@at "+time.Now().Add(time.Hour).UTC().Format(time.RFC3339Nano))
	m.Header.Set(spool.HeaderScheduleTarget, target)
	m.Data = []byte(`{"report":"weekly"}`)
	return m
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

func TestProducerRole(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	const p = "spool-producer"
	run(t, f, []step{
		{name: "publish a task", user: p, do: func(ctx context.Context, t *testing.T, f *fixture, c *client) error {
			ack, err := c.js.Publish(ctx, "spool.tasks.normal.email.send", []byte(`{"to":"ada@example.com"}`))
			if err != nil {
				return err
			}
			return wantStream(ack, names.TaskStream())
		}},
		{name: "publish a schedule", user: p, do: func(ctx context.Context, t *testing.T, f *fixture, c *client) error {
			ack, err := c.js.PublishMsg(ctx, scheduleMsg("sched-1", "spool.tasks.low.report"))
			if err != nil {
				return err
			}
			return wantStream(ack, names.TaskStream())
		}},
		// Cancelling is an operator's action (spool-admin, the broker).
		{name: "delete a schedule", user: p, denied: `Publish to "$JS.API.STREAM.MSG.DELETE.SPOOL_TASKS"`,
			do: func(ctx context.Context, t *testing.T, f *fixture, c *client) error {
				ack, err := f.admin.js.PublishMsg(ctx, scheduleMsg("cancel-me", "spool.tasks.low.report"))
				if err != nil {
					return err
				}
				s, err := c.js.Stream(ctx, names.TaskStream())
				if err != nil {
					return err
				}
				return s.DeleteMsg(ctx, ack.Sequence)
			}},
		{name: "cancel a task", user: p, denied: `Publish to "$KV.spool_cancel.t1"`,
			do: func(ctx context.Context, t *testing.T, f *fixture, c *client) error {
				_, err := c.js.Publish(ctx, names.CancelSubject("t1"), []byte(`{"id":"t1","by":"producer"}`))
				return err
			}},
		{name: "set a periodic schedule", user: p, denied: `Publish to "spool.cron.nightly"`,
			do: setCronSchedule},
		{name: "pause a task type", user: p, denied: `Publish to "$KV.spool_paused.report"`,
			do: pauseType},
		{name: "pause a priority", user: p, denied: `Publish to "$JS.API.CONSUMER.PAUSE.SPOOL_TASKS.spool-high"`,
			do: func(ctx context.Context, t *testing.T, f *fixture, c *client) error {
				_, err := c.js.PauseConsumer(ctx, names.TaskStream(), names.Consumer(spool.High), time.Now().Add(time.Hour))
				return err
			}},
		{name: "read a result", user: p, do: func(ctx context.Context, t *testing.T, f *fixture, c *client) error {
			doc := []byte(`{"id":"task-read","state":"completed"}`)
			if err := adminPutResult(ctx, f, "task-read", doc); err != nil {
				return err
			}
			kv, err := c.js.KeyValue(ctx, names.ResultsBucket())
			if err != nil {
				return err
			}
			e, err := kv.Get(ctx, "task-read")
			if err != nil {
				return err
			}
			if !bytes.Equal(e.Value(), doc) {
				return fmt.Errorf("result %q, want %q", e.Value(), doc)
			}
			return nil
		}},
		{name: "watch a result", user: p, do: func(ctx context.Context, t *testing.T, f *fixture, c *client) error {
			kv, err := c.js.KeyValue(ctx, names.ResultsBucket())
			if err != nil {
				return err
			}
			w, err := kv.Watch(ctx, "task-watch")
			if err != nil {
				return err
			}
			defer func() {
				if err := w.Stop(); err != nil {
					t.Errorf("stopping the watcher: %v", err)
				}
			}()
			doc := []byte(`{"id":"task-watch","state":"completed"}`)
			for {
				select {
				case e := <-w.Updates():
					if e == nil { // caught up: now write the result
						if err := adminPutResult(ctx, f, "task-watch", doc); err != nil {
							return err
						}
						continue
					}
					if !bytes.Equal(e.Value(), doc) {
						return fmt.Errorf("watched %q, want %q", e.Value(), doc)
					}
					return nil
				case <-ctx.Done():
					return fmt.Errorf("no update on the watched key: %w", ctx.Err())
				}
			}
		}},
		{name: "claim and release a unique key", user: p, do: func(ctx context.Context, t *testing.T, f *fixture, c *client) error {
			kv, err := c.js.KeyValue(ctx, names.UniqueBucket())
			if err != nil {
				return err
			}
			rev, err := kv.Create(ctx, "user-42", []byte("task-7"), jetstream.KeyTTL(time.Hour))
			if err != nil {
				return fmt.Errorf("create: %w", err)
			}
			if _, err := kv.Create(ctx, "user-42", []byte("task-8")); !errors.Is(err, jetstream.ErrKeyExists) {
				return fmt.Errorf("second create: %v, want ErrKeyExists", err)
			}
			if err := kv.Delete(ctx, "user-42", jetstream.LastRevision(rev)); err != nil {
				return fmt.Errorf("delete: %w", err)
			}
			return nil
		}},

		{name: "pull from spool-high", user: p, denied: `Publish to "$JS.API.CONSUMER.MSG.NEXT.SPOOL_TASKS.spool-high"`,
			do: func(ctx context.Context, t *testing.T, f *fixture, c *client) error {
				_, err := c.nc.RequestWithContext(ctx, "$JS.API.CONSUMER.MSG.NEXT.SPOOL_TASKS.spool-high", []byte(`{"batch":1}`))
				return err
			}},
		{name: "bind consumer spool-high", user: p, denied: `Publish to "$JS.API.CONSUMER.INFO.SPOOL_TASKS.spool-high"`,
			do: func(ctx context.Context, t *testing.T, f *fixture, c *client) error {
				_, err := c.js.Consumer(ctx, names.TaskStream(), "spool-high")
				return err
			}},
		{name: "ack a task", user: p, denied: `Publish to "$JS.ACK.SPOOL_TASKS.spool-high.1.1.1.1.0"`, fireAndForget: true,
			do: func(ctx context.Context, t *testing.T, f *fixture, c *client) error {
				return c.nc.Publish("$JS.ACK.SPOOL_TASKS.spool-high.1.1.1.1.0", []byte("+ACK"))
			}},
		{name: "write a result", user: p, denied: `Publish to "$KV.spool_results.forged"`,
			do: func(ctx context.Context, t *testing.T, f *fixture, c *client) error {
				kv, err := c.js.KeyValue(ctx, names.ResultsBucket())
				if err != nil {
					return err
				}
				_, err = kv.Put(ctx, "forged", []byte(`{"state":"completed"}`))
				return err
			}},
		{name: "publish a dead letter", user: p, denied: `Publish to "spool.dlq.high.x"`,
			do: func(ctx context.Context, t *testing.T, f *fixture, c *client) error {
				_, err := c.js.Publish(ctx, "spool.dlq.high.x", nil)
				return err
			}},
		{name: "read the DLQ stream", user: p, denied: `Publish to "$JS.API.STREAM.INFO.SPOOL_DLQ"`,
			do: func(ctx context.Context, t *testing.T, f *fixture, c *client) error {
				_, err := c.js.Stream(ctx, names.DLQStream())
				return err
			}},
		{name: "read a queued task by sequence", user: p, denied: `Publish to "$JS.API.DIRECT.GET.SPOOL_TASKS"`,
			do: func(ctx context.Context, t *testing.T, f *fixture, c *client) error {
				_, err := c.nc.RequestWithContext(ctx, "$JS.API.DIRECT.GET.SPOOL_TASKS", []byte(`{"seq":1}`))
				return err
			}},
		{name: "read the last task of a subject", user: p, denied: `Publish to "$JS.API.DIRECT.GET.SPOOL_TASKS.spool.tasks.normal.email.send"`,
			do: func(ctx context.Context, t *testing.T, f *fixture, c *client) error {
				_, err := c.nc.RequestWithContext(ctx, "$JS.API.DIRECT.GET.SPOOL_TASKS.spool.tasks.normal.email.send", nil)
				return err
			}},
		{name: "delete the task stream", user: p, denied: `Publish to "$JS.API.STREAM.DELETE.SPOOL_TASKS"`,
			do: func(ctx context.Context, t *testing.T, f *fixture, c *client) error {
				return c.js.DeleteStream(ctx, names.TaskStream())
			}},
		{name: "purge the task stream", user: p, denied: `Publish to "$JS.API.STREAM.PURGE.SPOOL_TASKS"`,
			do: func(ctx context.Context, t *testing.T, f *fixture, c *client) error {
				s, err := c.js.Stream(ctx, names.TaskStream())
				if err != nil {
					return fmt.Errorf("stream info is allowed, got %w", err)
				}
				return s.Purge(ctx)
			}},
		{name: "create a stream", user: p, denied: `Publish to "$JS.API.STREAM.CREATE.EVIL"`,
			do: func(ctx context.Context, t *testing.T, f *fixture, c *client) error {
				_, err := c.js.CreateStream(ctx, jetstream.StreamConfig{Name: "EVIL", Subjects: []string{"evil.>"}})
				return err
			}},
		{name: "create a consumer on the task stream", user: p, denied: `Publish to "$JS.API.CONSUMER.CREATE.SPOOL_TASKS.evil`,
			do: func(ctx context.Context, t *testing.T, f *fixture, c *client) error {
				_, err := c.js.CreateConsumer(ctx, names.TaskStream(), jetstream.ConsumerConfig{Durable: "evil", FilterSubject: "spool.tasks.high.x"})
				return err
			}},
		{name: "listen on task subjects", user: p, denied: `Subscription to "spool.tasks.>"`, fireAndForget: true,
			do: func(ctx context.Context, t *testing.T, f *fixture, c *client) error {
				_, err := c.nc.Subscribe("spool.tasks.>", func(*nats.Msg) {})
				return err
			}},
		{name: "call a remote handler", user: p, denied: `Publish to "spool.remote.echo"`,
			do: func(ctx context.Context, t *testing.T, f *fixture, c *client) error {
				_, err := c.nc.RequestWithContext(ctx, "spool.remote.echo", []byte("hi"))
				return err
			}},
	})
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

func TestConsumerRole(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	const cons = "spool-consumer"
	run(t, f, []step{
		{name: "fetch and ack a task", user: cons, do: func(ctx context.Context, t *testing.T, f *fixture, c *client) error {
			body := []byte(`{"report":"daily"}`)
			if _, err := f.seedTask(ctx, "spool.tasks.critical.report", body); err != nil {
				return err
			}
			cn, err := c.js.Consumer(ctx, names.TaskStream(), names.Consumer(spool.Critical))
			if err != nil {
				return err
			}
			batch, err := cn.Fetch(1, jetstream.FetchMaxWait(waitTimeout))
			if err != nil {
				return err
			}
			var got int
			for m := range batch.Messages() {
				got++
				if !bytes.Equal(m.Data(), body) {
					return fmt.Errorf("fetched %q, want %q", m.Data(), body)
				}
				if err := m.DoubleAck(ctx); err != nil {
					return fmt.Errorf("ack: %w", err)
				}
			}
			if err := batch.Error(); err != nil {
				return err
			}
			if got != 1 {
				return fmt.Errorf("fetched %d tasks, want 1", got)
			}
			return nil
		}},
		{name: "nak a task with delay", user: cons, do: func(ctx context.Context, t *testing.T, f *fixture, c *client) error {
			if _, err := f.seedTask(ctx, "spool.tasks.low.retry", []byte("x")); err != nil {
				return err
			}
			cn, err := c.js.Consumer(ctx, names.TaskStream(), names.Consumer(spool.Low))
			if err != nil {
				return err
			}
			m, err := cn.Next(jetstream.FetchMaxWait(waitTimeout))
			if err != nil {
				return err
			}
			if err := m.InProgress(); err != nil {
				return err
			}
			return m.NakWithDelay(time.Hour)
		}},
		{name: "write a result", user: cons, do: func(ctx context.Context, t *testing.T, f *fixture, c *client) error {
			kv, err := c.js.KeyValue(ctx, names.ResultsBucket())
			if err != nil {
				return err
			}
			_, err = kv.Put(ctx, "task-done", []byte(`{"id":"task-done","state":"completed"}`))
			return err
		}},
		{name: "read a result and a rule at the buckets' leaders", user: cons, do: func(ctx context.Context, t *testing.T, f *fixture, c *client) error {
			// What a redelivered task's stored result and a rules load on
			// a lagging replica are checked with (a direct get may come
			// from a replica): any answer will do, "no message found" too.
			for subj, req := range map[string]string{
				"$JS.API.STREAM.MSG.GET.KV_spool_results": `{"last_by_subj":"$KV.spool_results.task-none"}`,
				"$JS.API.STREAM.MSG.GET.KV_spool_limits":  `{"seq":1}`,
			} {
				if _, err := c.nc.RequestWithContext(ctx, subj, []byte(req)); err != nil {
					return fmt.Errorf("%s: %w", subj, err)
				}
			}
			return nil
		}},
		{name: "release a unique key", user: cons, do: func(ctx context.Context, t *testing.T, f *fixture, c *client) error {
			akv, err := f.admin.js.KeyValue(ctx, names.UniqueBucket())
			if err != nil {
				return err
			}
			if _, err := akv.Create(ctx, "order-9", []byte("task-9")); err != nil {
				return err
			}
			kv, err := c.js.KeyValue(ctx, names.UniqueBucket())
			if err != nil {
				return err
			}
			e, err := kv.Get(ctx, "order-9")
			if err != nil {
				return err
			}
			return kv.Delete(ctx, "order-9", jetstream.LastRevision(e.Revision()))
		}},
		{name: "publish a dead letter", user: cons, do: func(ctx context.Context, t *testing.T, f *fixture, c *client) error {
			m := nats.NewMsg("spool.dlq.high.email.send")
			m.Header.Set(spool.HeaderReason, "permanent")
			ack, err := c.js.PublishMsg(ctx, m, jetstream.WithExpectStream(names.DLQStream()))
			if err != nil {
				return err
			}
			return wantStream(ack, names.DLQStream())
		}},
		{name: "get and delete a task by sequence", user: cons, do: func(ctx context.Context, t *testing.T, f *fixture, c *client) error {
			body := []byte("dead on arrival")
			seq, err := f.seedTask(ctx, "spool.tasks.idle.crash", body)
			if err != nil {
				return err
			}
			s, err := c.js.Stream(ctx, names.TaskStream())
			if err != nil {
				return err
			}
			m, err := s.GetMsg(ctx, seq)
			if err != nil {
				return fmt.Errorf("get seq %d: %w", seq, err)
			}
			if !bytes.Equal(m.Data, body) {
				return fmt.Errorf("seq %d holds %q, want %q", seq, m.Data, body)
			}
			return s.DeleteMsg(ctx, seq)
		}},
		{name: "pull from the DLQ router consumer", user: cons, do: func(ctx context.Context, t *testing.T, f *fixture, c *client) error {
			cn, err := c.js.Consumer(ctx, names.AdvisoryStream(), names.RouterConsumer())
			if err != nil {
				return err
			}
			batch, err := cn.FetchNoWait(1)
			if err != nil {
				return err
			}
			for m := range batch.Messages() {
				return fmt.Errorf("unexpected advisory on %s", m.Subject())
			}
			return batch.Error()
		}},
		{name: "call a remote handler", user: cons, do: func(ctx context.Context, t *testing.T, f *fixture, c *client) error {
			h := f.srv.connect(t, "spool-handler")
			sub, err := h.nc.QueueSubscribe("spool.remote.>", "spool-handlers", func(m *nats.Msg) {
				if err := m.Respond(append([]byte("echo: "), m.Data...)); err != nil {
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
			h.noViolation(t) // the subscription is registered on the server
			reply, err := c.nc.RequestWithContext(ctx, "spool.remote.image.resize", []byte("cat.png"))
			if err != nil {
				return err
			}
			if string(reply.Data) != "echo: cat.png" {
				return fmt.Errorf("reply %q", reply.Data)
			}
			h.noViolation(t) // the handler's reply was allowed
			return nil
		}},

		{name: "cancel a task", user: cons, denied: `Publish to "$KV.spool_cancel.t1"`,
			do: func(ctx context.Context, t *testing.T, f *fixture, c *client) error {
				kv, err := c.js.KeyValue(ctx, names.CancelBucket())
				if err != nil {
					return err
				}
				_, err = kv.Put(ctx, "t1", []byte(`{"id":"t1","by":"worker"}`))
				return err
			}},
		{name: "set a periodic schedule", user: cons, denied: `Publish to "spool.cron.nightly"`,
			do: setCronSchedule},
		{name: "pause a task type", user: cons, denied: `Publish to "$KV.spool_paused.report"`,
			do: pauseType},
		{name: "resume a task type", user: cons, denied: `Publish to "$KV.spool_paused.invoice"`,
			do: func(ctx context.Context, t *testing.T, f *fixture, c *client) error {
				akv, err := f.admin.js.KeyValue(ctx, names.PausedBucket())
				if err != nil {
					return err
				}
				if _, err := akv.Put(ctx, "invoice", []byte(`{"type":"invoice","by":"ops"}`)); err != nil {
					return err
				}
				kv, err := c.js.KeyValue(ctx, names.PausedBucket())
				if err != nil {
					return err
				}
				return kv.Delete(ctx, "invoice")
			}},
		// A worker reads the pauses, hears their changes and parks a task
		// of a paused type.
		{name: "read type pauses and park a task", user: cons,
			do: func(ctx context.Context, t *testing.T, f *fixture, c *client) error {
				sub, err := c.nc.SubscribeSync(names.PausedFilter())
				if err != nil {
					return err
				}
				defer func() { _ = sub.Unsubscribe() }()
				c.noViolation(t)
				akv, err := f.admin.js.KeyValue(ctx, names.PausedBucket())
				if err != nil {
					return err
				}
				if _, err := akv.Put(ctx, "export", []byte(`{"type":"export","by":"ops"}`)); err != nil {
					return err
				}
				if _, err := sub.NextMsgWithContext(ctx); err != nil {
					return fmt.Errorf("hearing the pause: %w", err)
				}
				kv, err := c.js.KeyValue(ctx, names.PausedBucket())
				if err != nil {
					return err
				}
				keys, err := kv.ListKeys(ctx)
				if err != nil {
					return err
				}
				n := 0
				for range keys.Keys() {
					n++
				}
				if n == 0 {
					return errors.New("listed no paused type")
				}
				if _, err := kv.Get(ctx, "export"); err != nil {
					return err
				}
				subj, err := names.ParkedSubject(spool.High, "export")
				if err != nil {
					return err
				}
				ack, err := c.js.Publish(ctx, subj, []byte("parked"))
				if err != nil {
					return err
				}
				return wantStream(ack, names.TaskStream())
			}},
		{name: "pause a priority", user: cons, denied: `Publish to "$JS.API.CONSUMER.PAUSE.SPOOL_TASKS.spool-high"`,
			do: func(ctx context.Context, t *testing.T, f *fixture, c *client) error {
				_, err := c.js.PauseConsumer(ctx, names.TaskStream(), names.Consumer(spool.High), time.Now().Add(time.Hour))
				return err
			}},
		// A worker that finishes a workflow step enqueues the steps that
		// became ready.
		{name: "enqueue a workflow step", user: cons,
			do: func(ctx context.Context, t *testing.T, f *fixture, c *client) error {
				ack, err := c.js.Publish(ctx, "spool.tasks.high.x", nil)
				if err != nil {
					return err
				}
				return wantStream(ack, names.TaskStream())
			}},
		{name: "create a stream", user: cons, denied: `Publish to "$JS.API.STREAM.CREATE.EVIL"`,
			do: func(ctx context.Context, t *testing.T, f *fixture, c *client) error {
				_, err := c.js.CreateStream(ctx, jetstream.StreamConfig{Name: "EVIL", Subjects: []string{"evil.>"}})
				return err
			}},
		{name: "update the task stream", user: cons, denied: `Publish to "$JS.API.STREAM.UPDATE.SPOOL_TASKS"`,
			do: func(ctx context.Context, t *testing.T, f *fixture, c *client) error {
				_, err := c.js.UpdateStream(ctx, topology(t).TaskStreamConfig())
				return err
			}},
		{name: "delete the task stream", user: cons, denied: `Publish to "$JS.API.STREAM.DELETE.SPOOL_TASKS"`,
			do: func(ctx context.Context, t *testing.T, f *fixture, c *client) error {
				return c.js.DeleteStream(ctx, names.TaskStream())
			}},
		{name: "purge the task stream", user: cons, denied: `Publish to "$JS.API.STREAM.PURGE.SPOOL_TASKS"`,
			do: func(ctx context.Context, t *testing.T, f *fixture, c *client) error {
				s, err := c.js.Stream(ctx, names.TaskStream())
				if err != nil {
					return fmt.Errorf("stream info is allowed, got %w", err)
				}
				return s.Purge(ctx)
			}},
		{name: "create a consumer", user: cons, denied: `Publish to "$JS.API.CONSUMER.CREATE.SPOOL_TASKS.evil`,
			do: func(ctx context.Context, t *testing.T, f *fixture, c *client) error {
				_, err := c.js.CreateConsumer(ctx, names.TaskStream(), jetstream.ConsumerConfig{Durable: "evil", FilterSubject: "spool.tasks.high.x"})
				return err
			}},
		{name: "delete a consumer", user: cons, denied: `Publish to "$JS.API.CONSUMER.DELETE.SPOOL_TASKS.spool-high"`,
			do: func(ctx context.Context, t *testing.T, f *fixture, c *client) error {
				return c.js.DeleteConsumer(ctx, names.TaskStream(), names.Consumer(spool.High))
			}},
		{name: "read dead letters", user: cons, denied: `Publish to "$JS.API.DIRECT.GET.SPOOL_DLQ"`,
			do: func(ctx context.Context, t *testing.T, f *fixture, c *client) error {
				_, err := c.nc.RequestWithContext(ctx, "$JS.API.DIRECT.GET.SPOOL_DLQ", []byte(`{"seq":1}`))
				return err
			}},
		{name: "register the spool-consumer service", user: cons,
			do: func(ctx context.Context, t *testing.T, f *fixture, c *client) error {
				w, err := consumer.New(c.nc, consumer.NewMux(), consumer.WithWorkerName("sec-worker"))
				if err != nil {
					return err
				}
				svc, err := service.Add(c.nc, w)
				if err != nil {
					return err
				}
				defer func() { _ = svc.Stop() }()
				if err := c.nc.FlushWithContext(ctx); err != nil {
					return err
				}
				// An operator (admin) lists the fleet as `nats micro` does.
				for _, subject := range []string{"$SRV.PING", "$SRV.INFO.spool-consumer", "$SRV.STATS.spool-consumer"} {
					reply, err := f.admin.nc.RequestWithContext(ctx, subject, nil)
					if err != nil {
						return fmt.Errorf("%s: %w", subject, err)
					}
					if !strings.Contains(string(reply.Data), `"worker":"sec-worker"`) {
						return fmt.Errorf("%s answered %s", subject, reply.Data)
					}
				}
				var st micro.Stats
				reply, err := f.admin.nc.RequestWithContext(ctx, "$SRV.STATS.spool-consumer", nil)
				if err != nil {
					return err
				}
				if err := json.Unmarshal(reply.Data, &st); err != nil || len(st.Endpoints) != 1 {
					return fmt.Errorf("stats %s: %v", reply.Data, err)
				}
				if _, err := f.admin.nc.RequestWithContext(ctx, st.Endpoints[0].Subject, nil); err != nil {
					return fmt.Errorf("stats endpoint %s: %w", st.Endpoints[0].Subject, err)
				}
				return nil
			}},
		{name: "serve remote handlers", user: cons, denied: `Subscription to "spool.remote.>"`, fireAndForget: true,
			do: func(ctx context.Context, t *testing.T, f *fixture, c *client) error {
				_, err := c.nc.Subscribe("spool.remote.>", func(*nats.Msg) {})
				return err
			}},
	})
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
