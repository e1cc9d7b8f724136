package control_test

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/spoolq/spool/consumer"
	spool "github.com/spoolq/spool/shared"
	"github.com/spoolq/spool/streams"
	"github.com/spoolq/spool/streams/admin"
	"github.com/spoolq/spool/streams/embedded"
	"github.com/spoolq/spool/streams/streamstest"
)

// ticks records each fired task by id, with when it ran.
type ticks struct {
	mu  sync.Mutex
	ran map[string]int
	at  []time.Time // when each tick was fired (its stream time)
}

func (k *ticks) add(id string, fired time.Time) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.ran[id]++
	k.at = append(k.at, fired)
}

func (k *ticks) count() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return len(k.at)
}

// restartable starts a server whose restart (restart) keeps its port and
// store, so clients reconnect to it.
func restartable(t *testing.T) (env *streamstest.Env, restart func()) {
	t.Helper()
	store := t.TempDir()
	// By priority: its scenarios read the priority consumers, and park
	// the tasks of a paused type.
	env = streamstest.StartWith(t, embedded.Options{StoreDir: store}, streams.Settings{Consumers: streams.ConsumersByPriority})
	u, err := url.Parse(env.URL)
	if err != nil {
		t.Fatal(err)
	}
	port, err := strconv.Atoi(u.Port())
	if err != nil {
		t.Fatal(err)
	}
	return env, func() {
		t.Helper()
		env.Server.Shutdown()
		env.Server.WaitForShutdown()
		srv, err := embedded.Start(embedded.Options{StoreDir: store, Port: port})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { srv.Shutdown(); srv.WaitForShutdown() })
	}
}

// A schedule @every 1s fires once per tick for the whole system, across
// three consumer processes and through a server restart: as many tasks as
// seconds the server was up, each run once.
func TestPeriodicScheduleOncePerTick(t *testing.T) {
	t.Parallel()
	env, restart := restartable(t)
	ctx := streamstest.Context(t)
	adm, err := admin.New(env.Connect(t), admin.WithLogger(streamstest.Logger(t)))
	if err != nil {
		t.Fatal(err)
	}
	k := &ticks{ran: map[string]int{}}
	mux := consumer.NewMux()
	mux.HandleFunc("tick", func(ctx context.Context, task *consumer.Task) ([]byte, error) {
		if got := task.Headers.Get(spool.HeaderScheduleName); got != "every-second" {
			t.Errorf("fired task's %s header %q", spool.HeaderScheduleName, got)
		}
		k.add(task.ID, task.EnqueuedAt)
		return nil, nil
	})
	s := &stack{env: env}
	var workers []*consumer.Worker
	for range 3 {
		workers = append(workers, s.worker(t, mux))
	}
	start := time.Now()
	if err := adm.SetSchedule(ctx, admin.Schedule{Name: "every-second", Spec: "@every 1s", Type: "tick", Priority: spool.High}); err != nil {
		t.Fatal(err)
	}
	streamstest.WaitFor(t, 10*time.Second, func() error {
		if k.count() < 3 {
			return errors.New("three ticks")
		}
		return nil
	})
	// Restart the server on the same port and store.
	down := time.Now()
	restart()
	downtime := time.Since(down)
	before := k.count()
	streamstest.WaitFor(t, 20*time.Second, func() error {
		if k.count() < before+3 {
			return errors.New("three more ticks after the restart")
		}
		return nil
	})
	if err := adm.DeleteSchedule(ctx, "every-second"); err != nil {
		t.Fatal(err)
	}
	elapsed := time.Since(start)
	// Every tick fired before the delete runs: wait for the high
	// priority to drain.
	streamstest.WaitFor(t, 30*time.Second, func() error {
		c, err := env.JS.Consumer(ctx, "SPOOL_TASKS", "spool-high")
		if err != nil {
			return err
		}
		if info := c.CachedInfo(); info.NumPending+uint64(info.NumAckPending) != 0 {
			return fmt.Errorf("%d fired tasks still queued or running", info.NumPending+uint64(info.NumAckPending))
		}
		return nil
	})
	for _, w := range workers { // before the restarted server's cleanup
		if err := w.Stop(ctx); err != nil {
			t.Errorf("stopping a worker: %v", err)
		}
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	for id, n := range k.ran {
		if n != 1 {
			t.Errorf("tick task %s ran %d times", id, n)
		}
	}
	n := len(k.at)
	secs := elapsed.Seconds()
	// One tick per second the server was up; the ticks missed while it was
	// down collapse into at most one.
	if float64(n) > secs+1 || float64(n) < secs-downtime.Seconds()-2 {
		t.Errorf("%d ticks in %.1fs (server down %.1fs)", n, secs, downtime.Seconds())
	}
	slices.SortFunc(k.at, time.Time.Compare)
	for i := 1; i < len(k.at); i++ {
		if gap := k.at[i].Sub(k.at[i-1]); gap < 300*time.Millisecond {
			t.Errorf("ticks %d and %d only %s apart: a tick fired twice", i-1, i, gap)
		}
	}
	t.Logf("%d ticks in %.1fs, server down %.2fs", n, secs, downtime.Seconds())
}

// Schedules are listed with their next run, paused, resumed, updated and
// deleted; bad input is refused with the field at fault.
func TestScheduleManagement(t *testing.T) {
	t.Parallel()
	env := streamstest.Start(t, streams.Settings{})
	ctx := streamstest.Context(t)
	adm, err := admin.New(env.Connect(t), admin.WithLogger(streamstest.Logger(t)))
	if err != nil {
		t.Fatal(err)
	}
	retries := 2
	if err := adm.SetSchedule(ctx, admin.Schedule{Name: "report", Spec: "*/5 * * * *", TimeZone: "Europe/Paris",
		Type: "report.build", Priority: spool.Low, Payload: []byte(`{"kind":"daily"}`), MaxRetries: &retries,
		Headers: map[string]string{"X-Team": "ops"}}); err != nil {
		t.Fatal(err)
	}
	list, err := adm.Schedules(ctx)
	if err != nil || len(list) != 1 {
		t.Fatalf("schedules %+v, %v", list, err)
	}
	s := list[0]
	if s.Name != "report" || s.Spec != "0 */5 * * * *" || s.TimeZone != "Europe/Paris" || s.Type != "report.build" || s.Priority != spool.Low ||
		string(s.Payload) != `{"kind":"daily"}` || s.MaxRetries == nil || *s.MaxRetries != 2 || s.Headers["X-Team"] != "ops" || s.Paused {
		t.Fatalf("schedule %+v", s)
	}
	if s.NextRun == nil || time.Until(*s.NextRun) > 5*time.Minute || s.NextRun.Minute()%5 != 0 || s.NextRun.Second() != 0 {
		t.Fatalf("next run %v", s.NextRun)
	}
	if err := adm.PauseSchedule(ctx, "report"); err != nil {
		t.Fatal(err)
	}
	if s, err := adm.GetSchedule(ctx, "report"); err != nil || !s.Paused || s.NextRun != nil || s.Spec != "0 */5 * * * *" || s.Type != "report.build" {
		t.Fatalf("paused schedule %+v, %v", s, err)
	}
	info, err := env.Stream(t, "SPOOL_TASKS").Info(ctx)
	if err != nil || info.State.Msgs != 1 {
		t.Fatalf("task stream after pause: %+v, %v", info.State, err)
	}
	if err := adm.ResumeSchedule(ctx, "report"); err != nil {
		t.Fatal(err)
	}
	if s, err := adm.GetSchedule(ctx, "report"); err != nil || s.Paused || s.NextRun == nil || s.TimeZone != "Europe/Paris" {
		t.Fatalf("resumed schedule %+v, %v", s, err)
	}
	if err := adm.SetSchedule(ctx, admin.Schedule{Name: "report", Spec: "@hourly", Type: "report.build", Priority: spool.Low}); err != nil {
		t.Fatal(err)
	}
	if s, err := adm.GetSchedule(ctx, "report"); err != nil || s.Spec != "@hourly" || s.NextRun == nil || s.NextRun.Minute() != 0 {
		t.Fatalf("updated schedule %+v, %v", s, err)
	}
	if err := adm.DeleteSchedule(ctx, "report"); err != nil {
		t.Fatal(err)
	}
	if _, err := adm.GetSchedule(ctx, "report"); !errors.Is(err, admin.ErrScheduleNotFound) {
		t.Fatalf("deleted schedule: %v", err)
	}
	if err := adm.DeleteSchedule(ctx, "report"); !errors.Is(err, admin.ErrScheduleNotFound) {
		t.Fatalf("second delete: %v", err)
	}
	for _, tt := range []struct {
		s     admin.Schedule
		field string
	}{
		{admin.Schedule{Name: "a.b", Spec: "@every 1s", Type: "t", Priority: spool.Low}, "name"},
		{admin.Schedule{Name: "x", Spec: "@every 500ms", Type: "t", Priority: spool.Low}, "spec"},
		{admin.Schedule{Name: "x", Spec: "@every 1m", TimeZone: "Europe/Paris", Type: "t", Priority: spool.Low}, "spec"},
		{admin.Schedule{Name: "x", Spec: "* * *", Type: "t", Priority: spool.Low}, "spec"},
		{admin.Schedule{Name: "x", Spec: "61 * * * *", Type: "t", Priority: spool.Low}, "spec"},
		{admin.Schedule{Name: "x", Spec: "@daily", TimeZone: "Mars/Olympus", Type: "t", Priority: spool.Low}, "spec"},
		{admin.Schedule{Name: "x", Spec: "@daily", Type: "", Priority: spool.Low}, "type"},
	} {
		err := adm.SetSchedule(ctx, tt.s)
		var fe *spool.FieldError
		if !errors.As(err, &fe) || fe.Field != tt.field {
			t.Errorf("%+v: %v, want a %s error", tt.s, err, tt.field)
		}
	}
}
