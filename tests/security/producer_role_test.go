package security_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/spoolq/spool/producer"
	spool "github.com/spoolq/spool/shared"
)

func scheduleMsg(id, target string) *nats.Msg {
	m := nats.NewMsg("spool.sched." + id)
	m.Header.Set(spool.HeaderTaskID, id)
	m.Header.Set(spool.HeaderSchedule, "@at "+time.Now().Add(time.Hour).UTC().Format(time.RFC3339Nano))
	m.Header.Set(spool.HeaderScheduleTarget, target)
	m.Data = []byte(`{"report":"weekly"}`)
	return m
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
		// The client checks a task's type against the types the workers
		// serve: the consumer names where they pull by type, the
		// processes' metadata where they pull by priority (none runs here).
		{name: "list the task consumers", user: p, do: func(ctx context.Context, t *testing.T, f *fixture, c *client) error {
			// A worker serving report at high made its consumer.
			if _, err := f.makeTypeConsumer(ctx, f.admin, spool.High, "report"); err != nil {
				return err
			}
			s, err := c.js.Stream(ctx, names.TaskStream())
			if err != nil {
				return err
			}
			list := s.ConsumerNames(ctx)
			var listed []string
			for name := range list.Name() {
				listed = append(listed, name)
			}
			if err := list.Err(); err != nil {
				return err
			}
			if want := names.TypeConsumer(spool.High, "report"); len(listed) != 1 || listed[0] != want {
				return fmt.Errorf("consumers %v listed, want the type consumer %s", listed, want)
			}
			return nil
		}},
		{name: "be warned of a type no worker serves", user: p, do: func(ctx context.Context, t *testing.T, f *fixture, c *client) error {
			// A client's first enqueue waits for its first reading of the
			// served types for producer.ServedCheckTimeout, and gets no
			// warning when the reading ends later (under load): a new
			// client reads again.
			deadline := time.Now().Add(waitTimeout)
			for {
				warning, err := enqueueWarning(ctx, t, c, "email.send")
				if err != nil {
					return err
				}
				if warning == "" && time.Now().Before(deadline) {
					continue
				}
				// Workers pull by type: the warning names the type,
				// whichever other types the type consumers serve when it
				// is read.
				if !strings.Contains(warning, `"email.send"`) || !strings.Contains(warning, "wait in the queue until a worker serving it starts") {
					return fmt.Errorf("warning %q, want that no worker serves email.send", warning)
				}
				return nil
			}
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

// enqueueWarning enqueues a task of typ with a new producer client on c
// and returns the enqueue's warning.
func enqueueWarning(ctx context.Context, t *testing.T, c *client, typ string) (string, error) {
	pc, err := producer.New(c.nc, producer.WithLogger(testLogger(t)))
	if err != nil {
		return "", err
	}
	defer pc.Close()
	res, err := pc.Enqueue(ctx, producer.NewTask(typ, nil))
	if err != nil {
		return "", err
	}
	return res.Warning, nil
}
