package security_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/spoolq/spool/consumer"
	"github.com/spoolq/spool/consumer/dlqrouter"
	"github.com/spoolq/spool/producer"
	spool "github.com/spoolq/spool/shared"
	"github.com/spoolq/spool/streams"
	"github.com/spoolq/spool/streams/streamstest"
)

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

// TestConsumerRoleByType: where workers pull by type, the spool-consumer
// role runs a worker of any types, which makes its own consumers.
func TestConsumerRoleByType(t *testing.T) {
	t.Parallel()
	f := newByTypeFixture(t)
	run(t, f, []step{
		{name: "run a worker of any types", user: "spool-consumer", do: runTypes([]string{"report.*"},
			byTypeTask{"report.daily", spool.High}, byTypeTask{"report.weekly", spool.Idle})},
	})
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
