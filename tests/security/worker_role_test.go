package security_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/spoolq/spool/consumer"
	"github.com/spoolq/spool/consumer/dlqrouter"
	"github.com/spoolq/spool/producer"
	spool "github.com/spoolq/spool/shared"
	"github.com/spoolq/spool/streams"
	"github.com/spoolq/spool/streams/streamstest"
)

// billing is the example worker role of one service in auth.conf: it
// serves billing.* and invoice.send.
const billing = "spool-worker-billing"

var billingTypes = []string{"billing.*", "invoice.send"}

// newByTypeFixture provisions a deployment where workers pull by type.
func newByTypeFixture(t *testing.T) *fixture {
	t.Helper()
	srv := startAuth(t, false)
	srv.provision(t, streams.Settings{Consumers: streams.ConsumersByType})
	return &fixture{srv: srv, admin: srv.connect(t, "spool-admin")}
}

// startWorker starts a real worker on c's connection, stopped when t ends.
func startWorker(ctx context.Context, t *testing.T, c *client, h consumer.Handler, opts ...consumer.Option) error {
	t.Helper()
	opts = append([]consumer.Option{consumer.WithWorkerName("sec-" + c.user), consumer.WithLogger(testLogger(t))}, opts...)
	w, err := consumer.New(c.nc, h, opts...)
	if err != nil {
		return err
	}
	if err := w.Start(ctx); err != nil {
		return fmt.Errorf("starting the worker as %s: %w", c.user, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := w.Stop(ctx); err != nil {
			t.Errorf("stopping the worker: %v", err)
		}
	})
	return nil
}

// typeConsumer is the consumer of priority p and pattern as the workers
// make it from the template on SPOOL_TASKS.
func (f *fixture) typeConsumer(ctx context.Context, p spool.Priority, pattern string) (jetstream.ConsumerConfig, error) {
	s, err := f.admin.js.Stream(ctx, names.TaskStream())
	if err != nil {
		return jetstream.ConsumerConfig{}, err
	}
	return streams.TypeConsumerConfig(names, s.CachedInfo().Config, p, pattern), nil
}

// makeTypeConsumer makes, as c, the consumer of priority p and pattern as
// a worker serving pattern does, or binds it when it exists.
func (f *fixture) makeTypeConsumer(ctx context.Context, c *client, p spool.Priority, pattern string) (jetstream.Consumer, error) {
	cfg, err := f.typeConsumer(ctx, p, pattern)
	if err != nil {
		return nil, err
	}
	cn, err := c.js.CreateConsumer(ctx, names.TaskStream(), cfg)
	if errors.Is(err, jetstream.ErrConsumerExists) {
		return c.js.Consumer(ctx, names.TaskStream(), cfg.Durable)
	}
	return cn, err
}

// byTypeTask is a task a by-type worker step enqueues and must complete.
type byTypeTask struct {
	typ string
	p   spool.Priority
}

// runTypes starts a real worker on c serving patterns, enqueues tasks as
// spool-producer and checks that each one completes with its handler's
// output stored and is acked (gone from the work queue).
func runTypes(patterns []string, tasks ...byTypeTask) func(ctx context.Context, t *testing.T, f *fixture, c *client) error {
	return func(ctx context.Context, t *testing.T, f *fixture, c *client) error {
		mux := consumer.NewMux()
		for _, task := range tasks {
			mux.HandleFunc(task.typ, func(ctx context.Context, run *consumer.Task) ([]byte, error) {
				return fmt.Appendf(nil, `{"ran":%q}`, run.Type), nil
			})
		}
		if err := startWorker(ctx, t, c, mux, consumer.WithTypes(patterns...)); err != nil {
			return err
		}
		prod := f.srv.connect(t, "spool-producer")
		client, err := producer.New(prod.nc, producer.WithLogger(testLogger(t)))
		if err != nil {
			return err
		}
		defer client.Close()
		for _, task := range tasks {
			res, err := client.Enqueue(ctx, producer.NewTask(task.typ, []byte(`{}`)), producer.AtPriority(task.p))
			if err != nil {
				return fmt.Errorf("enqueueing %s: %w", task.typ, err)
			}
			doc, err := client.Wait(ctx, res.ID)
			if err != nil {
				return fmt.Errorf("waiting for %s %s: %w", task.typ, res.ID, err)
			}
			want := fmt.Sprintf(`{"ran":%q}`, task.typ)
			if doc.State != spool.StateCompleted || string(doc.Result) != want {
				return fmt.Errorf("%s %s: %s with result %s (%s), want completed with %s", task.typ, res.ID, doc.State, doc.Result, doc.Error, want)
			}
		}
		// Acked: the work queue removes a task once its ack arrives.
		stream, err := f.admin.js.Stream(ctx, names.TaskStream())
		if err != nil {
			return err
		}
		streamstest.WaitFor(t, waitTimeout, func() error {
			for _, task := range tasks {
				subject := "spool.tasks." + task.p.String() + "." + task.typ
				info, err := stream.Info(ctx, jetstream.WithSubjectFilter(subject))
				if err != nil {
					return err
				}
				if n := info.State.Subjects[subject]; n != 0 {
					return fmt.Errorf("%d tasks left on %s", n, subject)
				}
			}
			return nil
		})
		// Pulled through the consumers of the worker's own patterns.
		for _, pattern := range patterns {
			name := names.TypeConsumer(spool.High, pattern)
			cn, err := f.admin.js.Consumer(ctx, names.TaskStream(), name)
			if err != nil {
				return fmt.Errorf("consumer %s: %w", name, err)
			}
			if got, want := cn.CachedInfo().Config.FilterSubject, names.TypeFilter(spool.High, pattern); got != want {
				return fmt.Errorf("consumer %s filters %s, want %s", name, got, want)
			}
		}
		return nil
	}
}

// TestWorkerRoleByType: where workers pull by type, the worker role of one
// service runs its own types' tasks and cannot pull, settle, make or pause
// the consumers of other types; the generic spool-consumer role runs a
// worker of any types.
func TestWorkerRoleByType(t *testing.T) {
	t.Parallel()
	f := newByTypeFixture(t)
	ctx := testContext(t)
	// Another service's consumer, made as its workers would.
	shop, err := f.typeConsumer(ctx, spool.Normal, "shop.order")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.admin.js.CreateConsumer(ctx, names.TaskStream(), shop); err != nil {
		t.Fatal(err)
	}
	const shopConsumer = "spool-normal-shop~order"
	if shop.Durable != shopConsumer {
		t.Fatalf("the shop.order consumer is %s, want %s as auth.conf spells such names", shop.Durable, shopConsumer)
	}
	run(t, f, []step{
		{name: "run its own types' tasks", user: billing, do: runTypes(billingTypes,
			byTypeTask{"billing.charge", spool.High}, byTypeTask{"billing.refund", spool.Critical},
			byTypeTask{"invoice.send", spool.Normal})},
		{name: "run a worker of any types", user: "spool-consumer", do: runTypes([]string{"report.*"},
			byTypeTask{"report.daily", spool.High}, byTypeTask{"report.weekly", spool.Idle})},
		{name: "make, pause and resume its own consumer", user: billing,
			do: func(ctx context.Context, t *testing.T, f *fixture, c *client) error {
				cfg, err := f.typeConsumer(ctx, spool.Low, "invoice.send")
				if err != nil {
					return err
				}
				if _, err := c.js.CreateConsumer(ctx, names.TaskStream(), cfg); err != nil && !errors.Is(err, jetstream.ErrConsumerExists) {
					return err
				}
				if _, err := c.js.PauseConsumer(ctx, names.TaskStream(), cfg.Durable, time.Now().Add(time.Hour)); err != nil {
					return err
				}
				_, err = c.js.ResumeConsumer(ctx, names.TaskStream(), cfg.Durable)
				return err
			}},
		{name: "call its own remote handler", user: billing,
			do: func(ctx context.Context, t *testing.T, f *fixture, c *client) error {
				return callRemote(ctx, t, f, c, "spool.remote.billing.charge")
			}},

		{name: "pull another type's tasks", user: billing, denied: `Publish to "$JS.API.CONSUMER.MSG.NEXT.SPOOL_TASKS.` + shopConsumer + `"`,
			do: func(ctx context.Context, t *testing.T, f *fixture, c *client) error {
				if _, err := f.seedTask(ctx, "spool.tasks.normal.shop.order", []byte(`{}`)); err != nil {
					return err
				}
				_, err := c.nc.RequestWithContext(ctx, "$JS.API.CONSUMER.MSG.NEXT.SPOOL_TASKS."+shopConsumer,
					fmt.Appendf(nil, `{"batch":1,"expires":%d}`, waitTimeout))
				return err
			}},
		{name: "look up another type's consumer", user: billing, denied: `Publish to "$JS.API.CONSUMER.INFO.SPOOL_TASKS.` + shopConsumer + `"`,
			do: func(ctx context.Context, t *testing.T, f *fixture, c *client) error {
				_, err := c.js.Consumer(ctx, names.TaskStream(), shopConsumer)
				return err
			}},
		{name: "make a consumer for another type", user: billing,
			denied: `Publish to "$JS.API.CONSUMER.CREATE.SPOOL_TASKS.spool-normal-stock~+.spool.tasks.normal.stock.*"`,
			do: func(ctx context.Context, t *testing.T, f *fixture, c *client) error {
				cfg, err := f.typeConsumer(ctx, spool.Normal, "stock.*")
				if err != nil {
					return err
				}
				_, err = c.js.CreateConsumer(ctx, names.TaskStream(), cfg)
				return err
			}},
		{name: "make its own consumer with another filter", user: billing,
			denied: `Publish to "$JS.API.CONSUMER.CREATE.SPOOL_TASKS.spool-high-billing~+.spool.tasks.high.shop.order"`,
			do: func(ctx context.Context, t *testing.T, f *fixture, c *client) error {
				cfg, err := f.typeConsumer(ctx, spool.High, "billing.*")
				if err != nil {
					return err
				}
				cfg.FilterSubject = "spool.tasks.high.shop.order"
				_, err = c.js.CreateConsumer(ctx, names.TaskStream(), cfg)
				return err
			}},
		{name: "make its own consumer with the filter in the body only", user: billing,
			denied: `Publish to "$JS.API.CONSUMER.CREATE.SPOOL_TASKS.spool-high-billing~+"`,
			do: func(ctx context.Context, t *testing.T, f *fixture, c *client) error {
				cfg, err := f.typeConsumer(ctx, spool.High, "billing.*")
				if err != nil {
					return err
				}
				cfg.FilterSubject, cfg.FilterSubjects = "", []string{"spool.tasks.high.shop.order"}
				_, err = c.js.CreateConsumer(ctx, names.TaskStream(), cfg)
				return err
			}},
		{name: "ack another consumer's task", user: billing, denied: `Publish to "$JS.ACK.SPOOL_TASKS.` + shopConsumer + `.`,
			do: func(ctx context.Context, t *testing.T, f *fixture, c *client) error {
				if _, err := f.seedTask(ctx, "spool.tasks.normal.shop.order", []byte(`{}`)); err != nil {
					return err
				}
				cn, err := f.admin.js.Consumer(ctx, names.TaskStream(), shopConsumer)
				if err != nil {
					return err
				}
				m, err := cn.Next(jetstream.FetchMaxWait(waitTimeout))
				if err != nil {
					return fmt.Errorf("admin pulling a shop task: %w", err)
				}
				// A double ack: the server answers an ack that arrives.
				_, err = c.nc.RequestWithContext(ctx, m.Reply(), []byte("+ACK"))
				return err
			}},
		{name: "pause another type's consumer", user: billing, denied: `Publish to "$JS.API.CONSUMER.PAUSE.SPOOL_TASKS.` + shopConsumer + `"`,
			do: func(ctx context.Context, t *testing.T, f *fixture, c *client) error {
				_, err := c.js.PauseConsumer(ctx, names.TaskStream(), shopConsumer, time.Now().Add(time.Hour))
				return err
			}},
		{name: "call another service's remote handler", user: billing, denied: `Publish to "spool.remote.shop.order"`,
			do: func(ctx context.Context, t *testing.T, f *fixture, c *client) error {
				_, err := c.nc.RequestWithContext(ctx, "spool.remote.shop.order", nil)
				return err
			}},
		{name: "run the DLQ router", user: billing, denied: `Publish to "$JS.API.CONSUMER.INFO.SPOOL_ADVISORIES.spool-dlq-router"`,
			do: func(ctx context.Context, t *testing.T, f *fixture, c *client) error {
				_, err := c.js.Consumer(ctx, names.AdvisoryStream(), names.RouterConsumer())
				return err
			}},
	})
}

// callRemote answers subject as spool-handler and calls it as c.
func callRemote(ctx context.Context, t *testing.T, f *fixture, c *client, subject string) error {
	h := f.srv.connect(t, "spool-handler")
	sub, err := h.nc.Subscribe(subject, func(m *nats.Msg) {
		if err := m.Respond([]byte("done")); err != nil {
			t.Errorf("responding: %v", err)
		}
	})
	if err != nil {
		return err
	}
	defer func() { _ = sub.Unsubscribe() }()
	h.noViolation(t) // the subscription is registered on the server
	reply, err := c.nc.RequestWithContext(ctx, subject, nil)
	if err != nil {
		return err
	}
	if string(reply.Data) != "done" {
		return fmt.Errorf("reply %q", reply.Data)
	}
	return nil
}

// TestWorkerRoleWildcardFilter pins what auth.conf says a subject
// permission cannot narrow: a "*" of a served pattern is a wildcard in the
// create subject, and it matches a published ">", so the billing role may
// make its billing.* consumer with the filter billing.> (deeper types).
func TestWorkerRoleWildcardFilter(t *testing.T) {
	t.Parallel()
	f := newByTypeFixture(t)
	ctx := testContext(t)
	c := f.srv.connect(t, billing)
	cfg, err := f.typeConsumer(ctx, spool.Idle, "billing.*")
	if err != nil {
		t.Fatal(err)
	}
	cfg.FilterSubject = "spool.tasks.idle.billing.>"
	if _, err := c.js.CreateConsumer(ctx, names.TaskStream(), cfg); err != nil {
		t.Fatalf("%v: if the permission now refuses it, correct auth.conf and deploy/README.md", err)
	}
	c.noViolation(t)
}

// TestConsumerRoleRouterByType: the DLQ router runs as spool-consumer where
// workers pull by type, and dead-letters a task no worker served within its
// deadline, which needs the names of the task consumers.
func TestConsumerRoleRouterByType(t *testing.T) {
	t.Parallel()
	f := newByTypeFixture(t)
	ctx := testContext(t)
	prod := f.srv.connect(t, "spool-producer")
	client, err := producer.New(prod.nc, producer.WithLogger(testLogger(t)))
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	res, err := client.Enqueue(ctx, producer.NewTask("nobody.home", []byte(`{}`)))
	if err != nil {
		t.Fatal(err)
	}
	c := f.srv.connect(t, "spool-consumer")
	r, err := dlqrouter.New(c.nc, dlqrouter.WithLogger(testLogger(t)), dlqrouter.WithUnservedDeadline(time.Second),
		dlqrouter.WithFetchWait(500*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := r.Stop(ctx); err != nil {
			t.Errorf("stopping the router: %v", err)
		}
	})
	doc, err := client.Wait(ctx, res.ID)
	if err != nil {
		t.Fatalf("waiting for the unserved task's dead letter: %v", err)
	}
	if doc.State != spool.StateDead || doc.Reason != spool.ReasonUnserved {
		b, _ := json.Marshal(doc)
		t.Fatalf("result %s, want dead with reason unserved", b)
	}
	c.noViolation(t)
}
