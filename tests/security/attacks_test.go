package security_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/spoolq/spool/consumer"
	spool "github.com/spoolq/spool/shared"
	"github.com/spoolq/spool/shared/jsproto"
	"github.com/spoolq/spool/streams"
	"github.com/spoolq/spool/streams/streamstest"
)

// The attacks a raw client can send as each role of auth.conf: roll-up
// headers, repeating schedules, purges, message deletes, consumers with any
// deliver subject or a durable name, direct gets, the account purge. Each
// is sent through jsproto.Tries with the connection, so a refused right also
// proves the caller learns it at once as a DeniedError.

// outcome is what an attack must meet.
type outcome int

const (
	// denied: the role's permissions refuse the subject.
	denied outcome = iota
	// refused: the permissions let it through and the stream refuses it.
	refused
	// allowed: the role may do it (deploy/README.md says why).
	allowed
)

func (o outcome) String() string { return [...]string{"denied", "refused", "allowed"}[o] }

// attackRoles are the roles of auth.conf other than spool-admin, who may do
// everything in SPOOL.
var attackRoles = []string{"spool-producer", "spool-broker", "spool-consumer", "spool-worker-billing", "spool-handler", "sys"}

// attack is one raw operation; want maps a role to its outcome (denied when
// the role is absent).
type attack struct {
	name string
	want map[string]outcome
	// do sends the operation once; the error is the server's answer.
	do func(ctx context.Context, f *fixture, c *client) error
}

// rollup publishes a message with Nats-Rollup: kind on subject.
func rollup(subject, kind string) func(ctx context.Context, f *fixture, c *client) error {
	return func(ctx context.Context, f *fixture, c *client) error {
		m := nats.NewMsg(subject)
		m.Header.Set("Nats-Rollup", kind)
		m.Data = []byte(`{}`)
		_, err := c.js.PublishMsg(ctx, m)
		return err
	}
}

// apiRequest sends a raw JetStream API request and returns the API error of
// its answer, if any.
func apiRequest(subject string, body any) func(ctx context.Context, f *fixture, c *client) error {
	return func(ctx context.Context, f *fixture, c *client) error {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		msg, err := c.nc.RequestWithContext(ctx, subject, b)
		if err != nil {
			return err
		}
		var resp struct {
			Error *jetstream.APIError `json:"error"`
		}
		if err := json.Unmarshal(msg.Data, &resp); err != nil {
			return fmt.Errorf("answer %q: %w", msg.Data, err)
		}
		if resp.Error != nil {
			return resp.Error
		}
		return nil
	}
}

// bucketWriters are the roles that may write each bucket (auth.conf).
var bucketWriters = map[string][]string{
	"results":   {"spool-broker", "spool-consumer", "spool-worker-billing"},
	"unique":    {"spool-producer", "spool-broker", "spool-consumer", "spool-worker-billing"},
	"cancel":    {"spool-broker"},
	"paused":    {"spool-broker"},
	"limits":    {"spool-broker"},
	"leases":    {"spool-consumer", "spool-worker-billing"},
	"workflows": {"spool-producer", "spool-broker", "spool-consumer", "spool-worker-billing"},
}

// rollupAttacks: a roll-up on a bucket is refused by the bucket's stream for
// every role that may write it, except on the buckets with per-key TTL
// markers (unique, leases), whose writers may delete every key anyway.
func rollupAttacks() []attack {
	var out []attack
	for bucket, writers := range bucketWriters {
		for _, kind := range []string{"all", "sub"} {
			want := map[string]outcome{}
			for _, w := range writers {
				want[w] = refused
				if bucket == "unique" || bucket == "leases" {
					want[w] = allowed
				}
			}
			subject := "$KV.spool_" + bucket + ".rollup-" + kind
			out = append(out, attack{name: "roll-up " + kind + " on spool_" + bucket, want: want, do: rollup(subject, kind)})
		}
	}
	return out
}

func attacks() []attack {
	taskWriters := map[string]outcome{"spool-producer": allowed, "spool-broker": allowed, "spool-consumer": allowed, "spool-worker-billing": allowed}
	workers := map[string]outcome{"spool-consumer": allowed, "spool-worker-billing": allowed}
	every := func(ctx context.Context, f *fixture, c *client) error {
		m := nats.NewMsg("spool.cron.every")
		m.Header.Set(spool.HeaderSchedule, "@every 1h")
		m.Header.Set(spool.HeaderScheduleTarget, "spool.tasks.low.report")
		_, err := c.js.PublishMsg(ctx, m)
		return err
	}
	list := []attack{
		{name: "purge the task stream", do: apiRequest("$JS.API.STREAM.PURGE.SPOOL_TASKS", struct{}{})},
		{name: "purge a bucket", do: apiRequest("$JS.API.STREAM.PURGE.KV_spool_results", struct{}{})},
		{name: "a repeating schedule on spool.cron", want: map[string]outcome{"spool-broker": allowed}, do: every},
		// A repeating schedule on spool.sched (a delayed task's subject)
		// is stored for every role that may enqueue delayed tasks: the
		// permissions cannot see the header. The workers neutralise it
		// (TestRepeatingScheduleOnSched).
		{name: "a push consumer on the task stream", do: apiRequest("$JS.API.CONSUMER.CREATE.SPOOL_TASKS",
			map[string]any{"stream_name": "SPOOL_TASKS", "config": map[string]any{"deliver_subject": "spool.remote.x", "ack_policy": "none"}})},
		{name: "a durable consumer on the task stream", do: apiRequest("$JS.API.CONSUMER.DURABLE.CREATE.SPOOL_TASKS.mine",
			map[string]any{"stream_name": "SPOOL_TASKS", "config": map[string]any{"durable_name": "mine", "ack_policy": "explicit"}})},
		{name: "a consumer of held tasks", do: apiRequest("$JS.API.CONSUMER.CREATE.SPOOL_TASKS.mine.spool.held.>",
			map[string]any{"stream_name": "SPOOL_TASKS", "config": map[string]any{"durable_name": "mine", "filter_subject": "spool.held.>", "ack_policy": "explicit"}})},
		// Where workers pull by type, the generic worker role may make a
		// task consumer under any name: a permission cannot hold a
		// wildcard inside a token, so spool-<priority>-<pattern> cannot be
		// told from other names. On a type a worker serves, the stream
		// refuses it for overlapping the type consumer's filter (the
		// fixture makes spool-high-x, as such a worker would).
		{name: "a task consumer of any name on a served type", want: map[string]outcome{"spool-consumer": refused},
			do: apiRequest("$JS.API.CONSUMER.CREATE.SPOOL_TASKS.mine.spool.tasks.high.x",
				map[string]any{"stream_name": "SPOOL_TASKS", "config": map[string]any{"durable_name": "mine", "filter_subject": "spool.tasks.high.x", "ack_policy": "explicit"}})},
		// ... and on a type no worker serves yet, nothing refuses it
		// (deploy/README.md).
		{name: "a task consumer of any name on an unserved type", want: map[string]outcome{"spool-consumer": allowed},
			do: apiRequest("$JS.API.CONSUMER.CREATE.SPOOL_TASKS.mine-unserved.spool.tasks.high.unserved",
				map[string]any{"stream_name": "SPOOL_TASKS", "config": map[string]any{"durable_name": "mine-unserved", "filter_subject": "spool.tasks.high.unserved", "ack_policy": "explicit"}})},
		// A task consumer's filter stays under one priority: none takes
		// a type's tasks of every priority, or every task.
		{name: "a task consumer of every priority", do: apiRequest("$JS.API.CONSUMER.CREATE.SPOOL_TASKS.mine-all.spool.tasks.*.y",
			map[string]any{"stream_name": "SPOOL_TASKS", "config": map[string]any{"durable_name": "mine-all", "filter_subject": "spool.tasks.*.y", "ack_policy": "explicit"}})},
		{name: "a task consumer of every task", do: apiRequest("$JS.API.CONSUMER.CREATE.SPOOL_TASKS.mine-every.spool.tasks.>",
			map[string]any{"stream_name": "SPOOL_TASKS", "config": map[string]any{"durable_name": "mine-every", "filter_subject": "spool.tasks.>", "ack_policy": "explicit"}})},
		// A worker role makes its consumers with any settings in the body,
		// a push consumer's deliver subject too. Under the name of a type
		// consumer a worker made, the server refuses to turn it into a
		// push consumer (the fixture makes spool-high-billing~+).
		{name: "a push consumer under a served type consumer's name", want: map[string]outcome{"spool-consumer": refused, "spool-worker-billing": refused},
			do: apiRequest("$JS.API.CONSUMER.CREATE.SPOOL_TASKS.spool-high-billing~+.spool.tasks.high.billing.*",
				map[string]any{"stream_name": "SPOOL_TASKS", "config": map[string]any{"durable_name": "spool-high-billing~+",
					"filter_subject": "spool.tasks.high.billing.*", "deliver_subject": "_INBOX.push", "ack_policy": "explicit"}})},
		// Before any worker made it, nothing refuses it: the deliver
		// subject is in the body only (deploy/README.md).
		{name: "a push consumer under an unmade type consumer's name", want: map[string]outcome{"spool-consumer": allowed, "spool-worker-billing": allowed},
			do: apiRequest("$JS.API.CONSUMER.CREATE.SPOOL_TASKS.spool-low-billing~+.spool.tasks.low.billing.*",
				map[string]any{"stream_name": "SPOOL_TASKS", "config": map[string]any{"durable_name": "spool-low-billing~+",
					"filter_subject": "spool.tasks.low.billing.*", "deliver_subject": "_INBOX.push", "ack_policy": "explicit"}})},
		// A bucket a role may watch: the consumer is created (the watch
		// needs the right), bounded in life by the stream's limit, and a
		// longer life is refused.
		{name: "a durable consumer on spool_results outliving its use",
			want: map[string]outcome{"spool-producer": refused, "spool-broker": refused},
			do: apiRequest("$JS.API.CONSUMER.CREATE.KV_spool_results.mine.$KV.spool_results.>",
				map[string]any{"stream_name": "KV_spool_results", "config": map[string]any{
					"durable_name": "mine", "name": "mine", "filter_subject": "$KV.spool_results.>", "ack_policy": "explicit",
					"inactive_threshold": int64(time.Hour)}})},
		{name: "direct get of a queued task", want: map[string]outcome{"spool-broker": allowed, "spool-consumer": allowed, "spool-worker-billing": allowed},
			do: func(ctx context.Context, f *fixture, c *client) error {
				seq, err := f.seedTask(ctx, "spool.tasks.idle.seeded", []byte(`{}`))
				if err != nil {
					return err
				}
				msg, err := c.nc.RequestWithContext(ctx, "$JS.API.DIRECT.GET.SPOOL_TASKS", fmt.Appendf(nil, `{"seq":%d}`, seq))
				if err != nil {
					return err
				}
				if st := msg.Header.Get("Status"); st != "" {
					return fmt.Errorf("direct get answered status %s", st)
				}
				return nil
			}},
		{name: "delete a queued task", want: map[string]outcome{"spool-broker": allowed, "spool-consumer": allowed, "spool-worker-billing": allowed},
			do: func(ctx context.Context, f *fixture, c *client) error {
				seq, err := f.seedTask(ctx, "spool.tasks.idle.seeded", []byte(`{}`))
				if err != nil {
					return err
				}
				return apiRequest("$JS.API.STREAM.MSG.DELETE.SPOOL_TASKS", map[string]any{"seq": seq, "no_erase": true})(ctx, f, c)
			}},
		{name: "write a lease", want: workers,
			do: func(ctx context.Context, f *fixture, c *client) error {
				_, err := c.js.Publish(ctx, "$KV.spool_leases.c.x.1", []byte(`{}`))
				return err
			}},
		{name: "publish a task", want: taskWriters, do: func(ctx context.Context, f *fixture, c *client) error {
			_, err := c.js.Publish(ctx, "spool.tasks.idle.demo.echo", []byte(`{}`))
			return err
		}},
	}
	list = append(list, rollupAttacks()...)
	// Last: should they succeed, nothing after them could.
	return append(list,
		attack{name: "delete the task stream", do: apiRequest("$JS.API.STREAM.DELETE.SPOOL_TASKS", struct{}{})},
		attack{name: "purge the account", do: apiRequest("$JS.API.ACCOUNT.PURGE.SPOOL", struct{}{})})
}

// TestAttacks sends every attack as every role and checks the outcome the
// role table of deploy/README.md gives it.
func TestAttacks(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := testContext(t)
	// Consumers of served types, as their workers make them.
	for _, served := range []struct {
		p       spool.Priority
		pattern string
	}{{spool.High, "x"}, {spool.High, "billing.*"}} {
		if _, err := f.makeTypeConsumer(ctx, f.admin, served.p, served.pattern); err != nil {
			t.Fatal(err)
		}
	}
	conns := map[string]*client{}
	for _, role := range attackRoles {
		conns[role] = f.srv.connect(t, role)
	}
	for _, a := range attacks() {
		for _, role := range attackRoles {
			want := a.want[role]
			c := conns[role]
			ctx, cancel := context.WithTimeout(testContext(t), 8*time.Second)
			start := time.Now()
			err := jsproto.Tries{Conn: c.nc, PerTry: 4 * time.Second}.Do(ctx, a.name, func(ctx context.Context) error {
				return a.do(ctx, f, c)
			})
			took := time.Since(start)
			cancel()
			var d *jsproto.DeniedError
			isDenied := errors.As(err, &d)
			switch {
			case want == denied && !isDenied:
				t.Errorf("%s: %s: %v, want a permission denial", role, a.name, err)
			case want == denied && took > 3*time.Second:
				t.Errorf("%s: %s: denied after %s, want at once", role, a.name, took)
			case want == denied && !strings.Contains(err.Error(), "the role "+role+" may not"):
				t.Errorf("%s: %s: %v does not name the role", role, a.name, err)
			case want == refused && (err == nil || isDenied):
				t.Errorf("%s: %s: %v, want the stream to refuse it", role, a.name, err)
			case want == allowed && err != nil:
				t.Errorf("%s: %s: %v, want it allowed", role, a.name, err)
			}
			// The violation seen (denied), the next attack starts clean.
			if isDenied {
				if err := c.nc.FlushTimeout(waitTimeout); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
}

// TestTaskStreamRollups pins what the server forces: a stream with message
// schedules (delayed tasks, spool.cron) allows roll-ups whatever its
// configuration says, and schedules can never be turned off on it. So a
// role that may publish to SPOOL_TASKS may send a roll-up there; the
// producer is the one role for which that is more than its other rights
// give (deploy/README.md). Should a server release lift this, the stream
// must turn roll-ups off and this test says so.
func TestTaskStreamRollups(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := testContext(t)
	s, err := f.admin.js.Stream(ctx, names.TaskStream())
	if err != nil {
		t.Fatal(err)
	}
	cfg := s.CachedInfo().Config
	if !cfg.AllowMsgSchedules {
		t.Fatal("SPOOL_TASKS has no message schedules")
	}
	cfg.AllowRollup = false
	if _, err := f.admin.js.UpdateStream(ctx, cfg); err != nil {
		t.Fatalf("updating SPOOL_TASKS: %v", err)
	}
	s, err = f.admin.js.Stream(ctx, names.TaskStream())
	if err != nil {
		t.Fatal(err)
	}
	if !s.CachedInfo().Config.AllowRollup {
		t.Fatal("the server now lets a stream with schedules refuse roll-ups: turn them off on SPOOL_TASKS (streams.TaskStreamConfig) and refuse the producer's roll-up in TestAttacks")
	}
	topo := topology(t)
	if err := streams.Provision(ctx, f.admin.js, topo, testLogger(t)); err != nil {
		t.Fatal(err)
	}
}

// TestRepeatingScheduleOnSched: a raw producer may publish a repeating
// schedule on a delayed task's subject (permissions cannot see the
// Nats-Schedule header), but it makes no periodic task: a worker running
// as spool-consumer removes the schedule after its first fire and
// dead-letters its task with reason bad_input, and the task never runs.
func TestRepeatingScheduleOnSched(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	var runs atomic.Int64
	mux := consumer.NewMux()
	mux.HandleFunc("evil.tick", func(ctx context.Context, task *consumer.Task) ([]byte, error) {
		runs.Add(1)
		return nil, nil
	})
	cons := f.srv.connect(t, "spool-consumer")
	if err := startWorker(ctx, t, cons, mux); err != nil {
		t.Fatal(err)
	}

	prod := f.srv.connect(t, "spool-producer")
	m := nats.NewMsg("spool.sched.evil-1")
	m.Header.Set(spool.HeaderTaskID, "evil-1")
	m.Header.Set(spool.HeaderSchedule, "@every 1s")
	m.Header.Set(spool.HeaderScheduleTarget, "spool.tasks.high.evil.tick")
	m.Data = []byte(`{}`)
	if _, err := prod.js.PublishMsg(ctx, m); err != nil {
		t.Fatalf("the producer's repeating schedule was not stored (%v): if permissions now refuse it, say so in deploy/README.md", err)
	}

	tasks, err := f.admin.js.Stream(ctx, names.TaskStream())
	if err != nil {
		t.Fatal(err)
	}
	dlq, err := f.admin.js.Stream(ctx, names.DLQStream())
	if err != nil {
		t.Fatal(err)
	}
	const dead = "spool.dlq.high.evil.tick"
	streamstest.WaitFor(t, 30*time.Second, func() error {
		if _, err := tasks.GetLastMsgForSubject(ctx, "spool.sched.evil-1"); !errors.Is(err, jetstream.ErrMsgNotFound) {
			return fmt.Errorf("the repeating schedule is still stored (%v)", err)
		}
		if _, err := dlq.GetLastMsgForSubject(ctx, dead); err != nil {
			return fmt.Errorf("no dead letter on %s: %w", dead, err)
		}
		return nil
	})
	letter, err := dlq.GetLastMsgForSubject(ctx, dead)
	if err != nil {
		t.Fatal(err)
	}
	if r := letter.Header.Get(spool.HeaderReason); r != string(spool.ReasonBadInput) {
		t.Errorf("dead letter reason %q, want bad_input", r)
	}
	if e := letter.Header.Get(spool.HeaderError); !strings.Contains(e, "repeating schedules on spool.sched are refused") ||
		!strings.Contains(e, "spool.cron.<name>") {
		t.Errorf("dead letter error %q does not say why", e)
	}
	// No task of the schedule is left in the queue (a second fire before
	// the removal would be), and none ran.
	streamstest.WaitFor(t, 20*time.Second, func() error {
		info, err := tasks.Info(ctx, jetstream.WithSubjectFilter("spool.tasks.high.evil.tick"))
		if err != nil {
			return err
		}
		if n := info.State.Subjects["spool.tasks.high.evil.tick"]; n != 0 {
			return fmt.Errorf("%d tasks of the schedule queued", n)
		}
		return nil
	})
	info, err := dlq.Info(ctx, jetstream.WithSubjectFilter(dead))
	if err != nil {
		t.Fatal(err)
	}
	if n := info.State.Subjects[dead]; n != 1 {
		t.Errorf("%d dead letters on %s, want 1: the schedule fired after its first task", n, dead)
	}
	if n := runs.Load(); n != 0 {
		t.Errorf("the schedule's task ran %d times", n)
	}
	cons.noViolation(t)
}
