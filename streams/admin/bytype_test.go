package admin_test

import (
	"strings"
	"testing"
	"time"

	spool "github.com/spoolq/spool/shared"
	"github.com/spoolq/spool/streams"
	"github.com/spoolq/spool/streams/admin"
	"github.com/spoolq/spool/streams/streamstest"
)

// Where workers pull by type, status sums every type consumer of a
// priority, lists the queued types no consumer delivers with their count
// and oldest wait, and a priority pause pauses each type consumer of that
// priority only.
func TestByTypeStatusAndPause(t *testing.T) {
	t.Parallel()
	e := streamstest.Start(t, streams.Settings{Consumers: streams.ConsumersByType})
	c := newClient(t, e)
	ctx := streamstest.Context(t)
	tasks := e.Stream(t, e.Names.TaskStream())
	for _, p := range []spool.Priority{spool.Normal, spool.High} {
		// What a worker in any language does: make the consumer of the
		// pattern it serves from the template on the task stream.
		cfg := streams.TypeConsumerConfig(e.Names, tasks.CachedInfo().Config, p, "bt.a.*")
		if _, err := tasks.CreateConsumer(ctx, cfg); err != nil {
			t.Fatal(err)
		}
	}
	for subject, n := range map[string]int{"spool.tasks.normal.bt.a.x": 2, "spool.tasks.normal.bt.b": 3, "spool.tasks.low.bt.a.x": 1} {
		for range n {
			if _, err := e.JS.Publish(ctx, subject, []byte("{}")); err != nil {
				t.Fatal(err)
			}
		}
	}
	st, err := c.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Consumers != streams.ConsumersByType {
		t.Errorf("consumers %q", st.Consumers)
	}
	if got := st.Priorities[spool.Normal].Pending; got != 2 {
		t.Errorf("normal pending %d, want the 2 of bt.a.x", got)
	}
	want := map[string]uint64{"normal bt.b": 3, "low bt.a.x": 1}
	if len(st.Unserved) != len(want) {
		t.Fatalf("unserved %+v, want %v", st.Unserved, want)
	}
	for _, u := range st.Unserved {
		if n, ok := want[u.Priority.String()+" "+u.Type]; !ok || n != u.Queued || u.OldestWait <= 0 {
			t.Errorf("unserved %+v, want one of %v with an oldest wait", u, want)
		}
	}

	until, err := c.PausePriority(ctx, spool.Normal, time.Now().Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	paused := func(p spool.Priority) bool {
		cons, err := tasks.Consumer(ctx, e.Names.TypeConsumer(p, "bt.a.*"))
		if err != nil {
			t.Fatal(err)
		}
		info, err := cons.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return info.Paused
	}
	if !paused(spool.Normal) || paused(spool.High) || until.IsZero() {
		t.Errorf("after pausing normal: normal paused %v, high paused %v", paused(spool.Normal), paused(spool.High))
	}
	if err := c.ResumePriority(ctx, spool.Normal); err != nil {
		t.Fatal(err)
	}
	if paused(spool.Normal) {
		t.Error("normal still paused after resume")
	}
}

// Moving back to pulling by priority while type consumers exist is refused
// with the way out; moving to by type removes the priority consumers and
// keeps the queued tasks.
func TestConsumersSwitch(t *testing.T) {
	t.Parallel()
	e := streamstest.Start(t, streams.Settings{Consumers: streams.ConsumersByPriority})
	ctx := streamstest.Context(t)
	for range 4 {
		if _, err := e.JS.Publish(ctx, "spool.tasks.normal.sw.x", []byte("{}")); err != nil {
			t.Fatal(err)
		}
	}
	typed, err := streams.New(e.Names, streams.Settings{Consumers: streams.ConsumersByType})
	if err != nil {
		t.Fatal(err)
	}
	if err := streams.Provision(ctx, e.JS, typed, streamstest.Logger(t)); err != nil {
		t.Fatal(err)
	}
	tasks := e.Stream(t, e.Names.TaskStream())
	if got := streams.ConsumersOf(tasks.CachedInfo().Config); got != streams.ConsumersByType {
		t.Fatalf("recorded %q", got)
	}
	if n := tasks.CachedInfo().State.Msgs; n != 4 {
		t.Errorf("%d tasks queued after the switch, want 4", n)
	}
	names := tasks.ConsumerNames(ctx)
	for name := range names.Name() {
		t.Errorf("consumer %s left after the switch", name)
	}
	// A re-provision that does not name the mode keeps it.
	keep, err := streams.New(e.Names, streams.Settings{})
	if err != nil {
		t.Fatal(err)
	}
	if err := streams.Provision(ctx, e.JS, keep, streamstest.Logger(t)); err != nil {
		t.Fatal(err)
	}
	if got := streams.ConsumersOf(e.Stream(t, e.Names.TaskStream()).CachedInfo().Config); got != streams.ConsumersByType {
		t.Errorf("a provision without SPOOL_CONSUMERS changed the mode to %q", got)
	}
	cfg := streams.TypeConsumerConfig(e.Names, tasks.CachedInfo().Config, spool.Normal, "sw.x")
	if _, err := tasks.CreateConsumer(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	back, err := streams.New(e.Names, streams.Settings{Consumers: streams.ConsumersByPriority})
	if err != nil {
		t.Fatal(err)
	}
	err = streams.Provision(ctx, e.JS, back, streamstest.Logger(t))
	if err == nil || !strings.Contains(err.Error(), "nats consumer rm") {
		t.Errorf("switch back with a type consumer: %v", err)
	}
}

// Where workers pull by type, a type served through consumers of its own is
// paused by the server, and the two pauses of a consumer (its priority's
// and its type's) hold it until both are resumed.
func TestByTypeNativeTypePause(t *testing.T) {
	t.Parallel()
	e := streamstest.Start(t, streams.Settings{Consumers: streams.ConsumersByType})
	c := newClient(t, e)
	ctx := streamstest.Context(t)
	tasks := e.Stream(t, e.Names.TaskStream())
	for _, p := range spool.Priorities {
		for _, pattern := range []string{"np.exact", "np.wide.*"} {
			cfg := streams.TypeConsumerConfig(e.Names, tasks.CachedInfo().Config, p, pattern)
			if _, err := tasks.CreateConsumer(ctx, cfg); err != nil {
				t.Fatal(err)
			}
		}
	}
	paused := func(p spool.Priority, pattern string) bool {
		t.Helper()
		cons, err := tasks.Consumer(ctx, e.Names.TypeConsumer(p, pattern))
		if err != nil {
			t.Fatal(err)
		}
		info, err := cons.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return info.Paused
	}
	if _, err := c.PauseType(ctx, "np.exact", admin.TypePauseOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, p := range spool.Priorities {
		if !paused(p, "np.exact") || paused(p, "np.wide.*") {
			t.Errorf("%s after pausing np.exact: exact paused %v, wide paused %v", p, paused(p, "np.exact"), paused(p, "np.wide.*"))
		}
	}
	if _, err := c.PausePriority(ctx, spool.High, time.Time{}); err != nil {
		t.Fatal(err)
	}
	if !paused(spool.High, "np.wide.*") {
		t.Error("a priority pause left a type consumer of the priority running")
	}
	// The type resumes; high's consumer of it stays paused for its
	// priority, the others run.
	if err := c.ResumeType(ctx, "np.exact"); err != nil {
		t.Fatal(err)
	}
	if !paused(spool.High, "np.exact") || paused(spool.Normal, "np.exact") {
		t.Errorf("after resuming the type: high paused %v (want true), normal paused %v (want false)", paused(spool.High, "np.exact"), paused(spool.Normal, "np.exact"))
	}
	if _, err := c.PauseType(ctx, "np.exact", admin.TypePauseOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := c.ResumePriority(ctx, spool.High); err != nil {
		t.Fatal(err)
	}
	if !paused(spool.High, "np.exact") || paused(spool.High, "np.wide.*") {
		t.Errorf("after resuming high: its np.exact paused %v (want true: the type is), np.wide.* paused %v", paused(spool.High, "np.exact"), paused(spool.High, "np.wide.*"))
	}
	// The priority's record is no task type: the type listing skips it.
	if _, err := c.PausePriority(ctx, spool.Idle, time.Time{}); err != nil {
		t.Fatal(err)
	}
	types, err := c.Types(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, ts := range types {
		if ts.Type != "np.exact" {
			t.Errorf("listed type %q", ts.Type)
		}
	}
}
