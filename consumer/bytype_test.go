package consumer_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/spoolq/spool/consumer"
	spool "github.com/spoolq/spool/shared"
	"github.com/spoolq/spool/streams"
	"github.com/spoolq/spool/streams/admin"
	"github.com/spoolq/spool/streams/streamstest"
)

// byTypeEnv provisions a deployment whose workers pull by type.
func byTypeEnv(t *testing.T) *env {
	t.Helper()
	return newEnv(t, streams.Settings{Consumers: streams.ConsumersByType})
}

// servedBy records which worker ran each task.
type servedBy struct {
	mu  sync.Mutex
	ran map[string]string // task id -> worker
}

func (s *servedBy) handler(worker string) consumer.HandlerFunc {
	return func(_ context.Context, tk *consumer.Task) ([]byte, error) {
		s.mu.Lock()
		defer s.mu.Unlock()
		if prev, ok := s.ran[tk.ID]; ok {
			return nil, fmt.Errorf("task %s ran on %s and again on %s", tk.ID, prev, worker)
		}
		s.ran[tk.ID] = worker + ":" + tk.Type
		return nil, nil
	}
}

func (s *servedBy) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.ran)
}

// Workers that serve different types each receive only their own, none is
// dead-lettered for want of a handler, and a type nobody serves stays
// queued until a worker that serves it starts.
func TestPullByTypeEachWorkerGetsItsOwn(t *testing.T) {
	e := byTypeEnv(t)
	s := &servedBy{ran: map[string]string{}}
	muxA := consumer.NewMux()
	muxA.Handle("fleet.a", s.handler("a"))
	muxB := consumer.NewMux()
	muxB.Handle("fleet.b", s.handler("b"))
	e.worker(muxA, consumer.WithWorkerName("worker-a"))
	e.worker(consumer.HandlerFunc(s.handler("b")), consumer.WithWorkerName("worker-b"), consumer.WithTypes("fleet.b"))

	const n = 30
	for i := range n {
		for _, typ := range []string{"fleet.a", "fleet.b", "fleet.c"} {
			e.publishID(spool.Priority(i%len(spool.Priorities)), typ, fmt.Sprintf("%s-%d", strings.ReplaceAll(typ, ".", "-"), i), nil, nil)
		}
	}
	streamstest.WaitFor(t, 30*time.Second, func() error {
		if got := s.count(); got != 2*n {
			return fmt.Errorf("%d of %d tasks ran", got, 2*n)
		}
		return nil
	})
	s.mu.Lock()
	for id, who := range s.ran {
		worker, typ, _ := strings.Cut(who, ":")
		if typ != "fleet."+worker {
			t.Errorf("task %s of type %s ran on worker %s", id, typ, worker)
		}
	}
	s.mu.Unlock()
	if got := e.streamMsgs(e.names.DLQStream()); got != 0 {
		t.Errorf("%d dead letters, want none", got)
	}
	// fleet.c has no worker: its tasks wait in the stream once the others
	// are acknowledged.
	streamstest.WaitFor(t, 30*time.Second, func() error {
		if got := e.taskMsgs(); got != n {
			return fmt.Errorf("%d tasks queued, want the %d of fleet.c", got, n)
		}
		return nil
	})
	e.worker(consumer.HandlerFunc(s.handler("c")), consumer.WithWorkerName("worker-c"), consumer.WithTypes("fleet.*.x", "fleet.c"))
	streamstest.WaitFor(t, 30*time.Second, func() error {
		if got := s.count(); got != 3*n {
			return fmt.Errorf("%d of %d tasks ran", got, 3*n)
		}
		return nil
	})
	streamstest.WaitFor(t, 30*time.Second, func() error {
		if got := e.taskMsgs(); got != 0 {
			return fmt.Errorf("%d tasks still queued", got)
		}
		return nil
	})
}

// A worker that pulls by type makes one consumer per priority and pattern,
// with the settings provisioning recorded, and none per priority exists.
func TestPullByTypeConsumers(t *testing.T) {
	e := newEnv(t, streams.Settings{Consumers: streams.ConsumersByType, AckWait: 7 * time.Second, MaxDeliver: 4})
	mux := consumer.NewMux()
	mux.HandleFunc("shop.order", func(context.Context, *consumer.Task) ([]byte, error) { return nil, nil })
	e.worker(consumer.HandlerFunc(func(context.Context, *consumer.Task) ([]byte, error) { return nil, nil }),
		consumer.WithTypes("shop.order", "shop.*", "mail.>"))
	ctx := testCtx(t)
	tasks, err := e.js.Stream(ctx, e.names.TaskStream())
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range spool.Priorities {
		if _, err := tasks.Consumer(ctx, e.names.Consumer(p)); !errors.Is(err, jetstream.ErrConsumerNotFound) {
			t.Errorf("priority consumer %s: %v, want not found", e.names.Consumer(p), err)
		}
		for _, pattern := range []string{"shop.*", "mail.>"} {
			c, err := tasks.Consumer(ctx, e.names.TypeConsumer(p, pattern))
			if err != nil {
				t.Fatalf("type consumer of %s %s: %v", p, pattern, err)
			}
			cfg := c.CachedInfo().Config
			if cfg.FilterSubject != e.names.TypeFilter(p, pattern) || cfg.AckWait != 7*time.Second || cfg.MaxDeliver != 4 {
				t.Errorf("consumer %s: filter %q ack wait %s max deliver %d", cfg.Durable, cfg.FilterSubject, cfg.AckWait, cfg.MaxDeliver)
			}
		}
		// shop.order is covered by shop.*: no consumer of its own.
		if _, err := tasks.Consumer(ctx, e.names.TypeConsumer(p, "shop.order")); !errors.Is(err, jetstream.ErrConsumerNotFound) {
			t.Errorf("consumer of a covered pattern: %v, want not found", err)
		}
	}
}

// A worker whose pattern overlaps another worker's without being the same
// pattern is refused at start with an error that says so; a handler that
// names no types serves every type, which overlaps any other.
func TestPullByTypeRefusals(t *testing.T) {
	e := byTypeEnv(t)
	nop := consumer.HandlerFunc(func(context.Context, *consumer.Task) ([]byte, error) { return nil, nil })
	e.worker(nop, consumer.WithTypes("acct.*"))
	w, err := consumer.New(e.connect(), nop, consumer.WithTypes("acct.open"), consumer.WithLogger(testLogger(t)))
	if err != nil {
		t.Fatal(err)
	}
	err = w.Start(testCtx(t))
	if !errors.Is(err, consumer.ErrInvalidOption) || !strings.Contains(err.Error(), "overlapping") {
		t.Errorf("start with an overlapping pattern: %v", err)
	}
	// A handler that names no types serves every type: it overlaps acct.*.
	w, err = consumer.New(e.connect(), nop, consumer.WithLogger(testLogger(t)))
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(testCtx(t)); !errors.Is(err, consumer.ErrInvalidOption) || !strings.Contains(err.Error(), "overlapping") {
		t.Errorf("start of a catch-all beside acct.*: %v", err)
	}
	w, err = consumer.New(e.connect(), nop, consumer.WithTypes("a.*", "*.b"), consumer.WithLogger(testLogger(t)))
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(testCtx(t)); !errors.Is(err, consumer.ErrInvalidOption) || !strings.Contains(err.Error(), "both match") {
		t.Errorf("start with partly overlapping patterns: %v", err)
	}
	if _, err := consumer.New(e.connect(), nop, consumer.WithTypes("a..b")); !errors.Is(err, consumer.ErrInvalidOption) {
		t.Errorf("WithTypes with an invalid pattern: %v", err)
	}
}

// A handler that names no types serves every type through the pattern ">"
// when it is the only worker.
func TestPullByTypeCatchAll(t *testing.T) {
	e := byTypeEnv(t)
	s := &servedBy{ran: map[string]string{}}
	e.worker(consumer.HandlerFunc(s.handler("all")))
	for i, typ := range []string{"x.one", "y.two.three", "z"} {
		e.publishID(spool.Priority(i), typ, fmt.Sprintf("catch-%d", i), nil, nil)
	}
	streamstest.WaitFor(t, 30*time.Second, func() error {
		if got := s.count(); got != 3 {
			return fmt.Errorf("%d of 3 tasks ran", got)
		}
		return nil
	})
	if _, err := e.js.Consumer(testCtx(t), e.names.TaskStream(), e.names.TypeConsumer(spool.Critical, ">")); err != nil {
		t.Errorf("the catch-all consumer: %v", err)
	}
}

// Where workers pull by type, a paused type served through its own
// consumers is held by the server: its tasks are neither run nor parked,
// they wait on their task subject, and a worker that makes the type's
// consumers after the pause joins it. They run after the resume.
func TestPullByTypeNativeTypePause(t *testing.T) {
	e := byTypeEnv(t)
	adm, err := admin.New(e.nc, admin.WithLogger(testLogger(t)))
	if err != nil {
		t.Fatal(err)
	}
	ctx := testCtx(t)
	if _, err := adm.PauseType(ctx, "np.held", admin.TypePauseOptions{Reason: "test"}); err != nil {
		t.Fatal(err)
	}
	if _, err := adm.PausePriority(ctx, spool.Low, time.Time{}); err != nil {
		t.Fatal(err)
	}
	s := &servedBy{ran: map[string]string{}}
	mux := consumer.NewMux()
	mux.Handle("np.held", s.handler("w"))
	mux.Handle("np.free", s.handler("w"))
	e.worker(mux)
	for _, p := range spool.Priorities {
		for _, typ := range []string{"np.held", "np.free"} {
			info, err := e.js.Consumer(ctx, e.names.TaskStream(), e.names.TypeConsumer(p, typ))
			if err != nil {
				t.Fatal(err)
			}
			want := typ == "np.held" || p == spool.Low
			if got := info.CachedInfo().Paused; got != want {
				t.Errorf("consumer %s made after the pauses: paused %v, want %v", info.CachedInfo().Name, got, want)
			}
		}
	}
	for i := range 5 {
		e.publishID(spool.Normal, "np.held", fmt.Sprintf("held-%d", i), nil, nil)
		e.publishID(spool.Normal, "np.free", fmt.Sprintf("free-%d", i), nil, nil)
	}
	streamstest.WaitFor(t, 30*time.Second, func() error {
		if got := e.taskMsgs(); got != 5 {
			return fmt.Errorf("%d tasks queued, want the 5 of the paused type", got)
		}
		return nil
	})
	if got := s.count(); got != 5 {
		t.Errorf("%d tasks ran, want the 5 of np.free", got)
	}
	// Not pulled: still on the task subject, never delivered, none parked.
	info, err := e.js.Stream(ctx, e.names.TaskStream())
	if err != nil {
		t.Fatal(err)
	}
	si, err := info.Info(ctx, jetstream.WithSubjectFilter(">"))
	if err != nil {
		t.Fatal(err)
	}
	if n := si.State.Subjects["spool.tasks.normal.np.held"]; n != 5 || len(si.State.Subjects) != 1 {
		t.Errorf("subjects %v, want the 5 tasks on spool.tasks.normal.np.held only", si.State.Subjects)
	}
	held, err := e.js.Consumer(ctx, e.names.TaskStream(), e.names.TypeConsumer(spool.Normal, "np.held"))
	if err != nil {
		t.Fatal(err)
	}
	if ci := held.CachedInfo(); ci.Delivered.Stream != 0 {
		t.Errorf("the paused type's consumer delivered up to %d", ci.Delivered.Stream)
	}
	if err := adm.ResumeType(ctx, "np.held"); err != nil {
		t.Fatal(err)
	}
	streamstest.WaitFor(t, 30*time.Second, func() error {
		if got := s.count(); got != 10 {
			return fmt.Errorf("%d of 10 tasks ran", got)
		}
		return nil
	})
}
