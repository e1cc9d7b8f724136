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
)

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
			cn, err := f.makeTypeConsumer(ctx, c, spool.Critical, "report")
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
			cn, err := f.makeTypeConsumer(ctx, c, spool.Low, "retry")
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
		// A worker that makes a type consumer while its priority is
		// paused pauses it too. Consumer names are not narrowed, so this
		// broad role may pause and resume every consumer of SPOOL_TASKS.
		{name: "pause and resume a task consumer", user: cons,
			do: func(ctx context.Context, t *testing.T, f *fixture, c *client) error {
				cn, err := f.makeTypeConsumer(ctx, c, spool.Idle, "report.*")
				if err != nil {
					return err
				}
				name := cn.CachedInfo().Name
				if _, err := c.js.PauseConsumer(ctx, names.TaskStream(), name, time.Now().Add(time.Hour)); err != nil {
					return err
				}
				_, err = c.js.ResumeConsumer(ctx, names.TaskStream(), name)
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
		// Task consumers only: held, parked and scheduled tasks are no
		// consumer's to take.
		{name: "create a consumer of held tasks", user: cons, denied: `Publish to "$JS.API.CONSUMER.CREATE.SPOOL_TASKS.evil.spool.held.>"`,
			do: func(ctx context.Context, t *testing.T, f *fixture, c *client) error {
				_, err := c.js.CreateConsumer(ctx, names.TaskStream(), jetstream.ConsumerConfig{Durable: "evil", FilterSubject: "spool.held.>"})
				return err
			}},
		{name: "create a consumer without a filter subject", user: cons, denied: `Publish to "$JS.API.CONSUMER.CREATE.SPOOL_TASKS.evil"`,
			do: func(ctx context.Context, t *testing.T, f *fixture, c *client) error {
				_, err := c.js.CreateConsumer(ctx, names.TaskStream(), jetstream.ConsumerConfig{Durable: "evil"})
				return err
			}},
		{name: "delete a consumer", user: cons, denied: `Publish to "$JS.API.CONSUMER.DELETE.SPOOL_TASKS.spool-high-report"`,
			do: func(ctx context.Context, t *testing.T, f *fixture, c *client) error {
				if _, err := f.makeTypeConsumer(ctx, c, spool.High, "report"); err != nil {
					return err
				}
				return c.js.DeleteConsumer(ctx, names.TaskStream(), names.TypeConsumer(spool.High, "report"))
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
