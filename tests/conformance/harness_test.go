package conformance_test

import (
	"context"
	"errors"
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

// stack is the topology of one behaviour, under its own prefix on the
// setup's server, and a producer client for it.
type stack struct {
	t      *testing.T
	env    *streamstest.Env
	names  spool.Names
	client *producer.Client
}

func newStack(t *testing.T, env *streamstest.Env, settings streams.Settings, prefix string) *stack {
	t.Helper()
	names, err := spool.NewNames(prefix)
	if err != nil {
		t.Fatal(err)
	}
	topo, err := streams.New(names, settings)
	if err != nil {
		t.Fatal(err)
	}
	if err := streams.Provision(streamstest.Context(t), env.JS, topo, streamstest.Logger(t)); err != nil {
		t.Fatalf("provisioning %s: %v", prefix, err)
	}
	// The setup is what it claims: storage and replicas as configured.
	cfg := env.Stream(t, names.TaskStream()).CachedInfo().Config
	if cfg.Storage != topo.TaskStreamConfig().Storage || cfg.Replicas != topo.Settings.Replicas {
		t.Fatalf("task stream has %s storage and %d replicas, want %s and %d",
			cfg.Storage, cfg.Replicas, topo.TaskStreamConfig().Storage, topo.Settings.Replicas)
	}
	client, err := producer.New(env.Connect(t), producer.WithNames(names), producer.WithLogger(streamstest.Logger(t)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(client.Close)
	return &stack{t: t, env: env, names: names, client: client}
}

// worker starts a worker for this stack on its own connection, stopped when
// the test ends unless the test stopped it. Retries back off 20ms.
func (s *stack) worker(h consumer.Handler, opts ...consumer.Option) *consumer.Worker {
	s.t.Helper()
	base := []consumer.Option{
		consumer.WithNames(s.names),
		consumer.WithLogger(streamstest.Logger(s.t)),
		consumer.WithWorkerName("conformance"),
		consumer.WithPolling(100*time.Millisecond, 50*time.Millisecond),
		consumer.WithRetry(20*time.Millisecond, 20*time.Millisecond, spool.DefaultMaxRetries),
	}
	w, err := consumer.New(s.env.Connect(s.t), h, append(base, opts...)...)
	if err != nil {
		s.t.Fatal(err)
	}
	s.start("worker", w.Start, w.Stop)
	return w
}

// start starts a long-running part and stops it (checking the error) when
// the test ends, unless the test stopped it first.
func (s *stack) start(what string, start, stop func(context.Context) error) {
	s.t.Helper()
	if err := start(streamstest.Context(s.t)); err != nil {
		s.t.Fatalf("starting the %s: %v", what, err)
	}
	s.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(s.t.Context()), streamstest.Timeout)
		defer cancel()
		if err := stop(ctx); err != nil {
			s.t.Errorf("stopping the %s: %v", what, err)
		}
	})
}

// router starts the DLQ router of this stack, stopped when the test ends.
func (s *stack) router() {
	s.t.Helper()
	r, err := dlqrouter.New(s.env.Connect(s.t), dlqrouter.WithNames(s.names), dlqrouter.WithLogger(streamstest.Logger(s.t)))
	if err != nil {
		s.t.Fatal(err)
	}
	s.start("router", r.Start, r.Stop)
}

func (s *stack) enqueue(task producer.Task, opts ...producer.EnqueueOption) producer.EnqueueResult {
	s.t.Helper()
	res, err := s.client.Enqueue(streamstest.Context(s.t), task, opts...)
	if err != nil {
		s.t.Fatalf("enqueue %s: %v", task.Type, err)
	}
	return res
}

// wait waits for task id to reach a terminal state and checks it is want.
func (s *stack) wait(id string, want spool.State) spool.Result {
	s.t.Helper()
	r, err := s.client.Wait(streamstest.Context(s.t), id)
	if err != nil {
		s.t.Fatalf("waiting for task %s: %v", id, err)
	}
	if r.State != want {
		s.t.Fatalf("task %s ended %s (reason %q, error %q), want %s", id, r.State, r.Reason, r.Error, want)
	}
	return r
}

// deadLetter returns the dead letter of a task of typ at priority p.
func (s *stack) deadLetter(p spool.Priority, typ string) *jetstream.RawStreamMsg {
	s.t.Helper()
	subject, err := s.names.DLQSubject(p, typ)
	if err != nil {
		s.t.Fatal(err)
	}
	dlq := s.env.Stream(s.t, s.names.DLQStream())
	// The dead letter is stored before the task's result says dead, but on
	// a cluster the read may be answered by a replica that has not stored
	// it yet (direct get): read again while it is not found.
	var m *jetstream.RawStreamMsg
	streamstest.WaitFor(s.t, 10*time.Second, func() error {
		var err error
		m, err = dlq.GetLastMsgForSubject(streamstest.Context(s.t), subject)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return fmt.Errorf("dead letter on %s: %w", subject, err)
		}
		if err != nil {
			s.t.Fatalf("dead letter on %s: %v", subject, err)
		}
		return nil
	})
	return m
}

// waitEmpty waits until the task stream holds no message: every task was
// acked or removed.
func (s *stack) waitEmpty() {
	s.t.Helper()
	tasks := s.env.Stream(s.t, s.names.TaskStream())
	streamstest.WaitFor(s.t, 10*time.Second, func() error {
		info, err := tasks.Info(streamstest.Context(s.t))
		if err != nil {
			return err
		}
		if n := info.State.Msgs; n != 0 {
			return fmt.Errorf("%d tasks left in the stream", n)
		}
		return nil
	})
}

// taskConsumer binds the consumer that delivers the tasks of typ at
// priority p on stream (SPOOL_TASKS or a partition's): the priority's own
// where workers pull by priority, else the type consumer of typ, made from
// the template SPOOL_TASKS records as a worker serving typ would.
func (s *stack) taskConsumer(stream string, p spool.Priority, typ string) (jetstream.Consumer, error) {
	ctx := streamstest.Context(s.t)
	tasks, err := s.env.JS.Stream(ctx, s.names.TaskStream())
	if err != nil {
		return nil, err
	}
	cfg := tasks.CachedInfo().Config
	if streams.ConsumersOf(cfg) != streams.ConsumersByType {
		return s.env.JS.Consumer(ctx, stream, s.names.Consumer(p))
	}
	return s.env.JS.CreateConsumer(ctx, stream, streams.TypeConsumerConfig(s.names, cfg, p, typ))
}
