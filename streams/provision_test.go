package streams_test

import (
	"context"
	"errors"
	"log/slog"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"

	spool "github.com/spoolq/spool/shared"
	"github.com/spoolq/spool/streams"
	"github.com/spoolq/spool/streams/embedded"
	"github.com/spoolq/spool/streams/streamstest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, streamstest.ServerGoroutines()...)
}

// startServer starts an embedded JetStream server owned by t and returns a
// JetStream context on a connection to it.
func startServer(t *testing.T) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	s, err := embedded.Start(embedded.Options{StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	return connect(t, s.ClientURL())
}

// connect opens a connection to url, closed by t.Cleanup, and a JetStream
// context on it.
func connect(t *testing.T, url string) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return nc, js
}

// startCluster starts a 3-node cluster owned by t (opts without StoreDir)
// and returns a JetStream context on a connection to all its nodes.
func startCluster(t *testing.T, opts embedded.Options) jetstream.JetStream {
	t.Helper()
	opts.StoreDir = t.TempDir()
	c, err := embedded.StartCluster(3, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Shutdown)
	_, js := connect(t, c.ClientURLs())
	return js
}

func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug}))
}

func ctxFor(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func topology(t *testing.T, prefix string) streams.Topology {
	t.Helper()
	names, err := spool.NewNames(prefix)
	if err != nil {
		t.Fatal(err)
	}
	topo, err := streams.New(names, streams.Settings{})
	if err != nil {
		t.Fatal(err)
	}
	return topo
}

// snapshot reads every object's configuration, without server-managed
// metadata, so two provisionings can be compared.
func snapshot(t *testing.T, ctx context.Context, js jetstream.JetStream, topo streams.Topology) map[string]any {
	t.Helper()
	out := map[string]any{}
	for _, name := range []string{topo.Names.TaskStream(), topo.Names.DLQStream(), topo.Names.AdvisoryStream(),
		"KV_" + topo.Names.ResultsBucket(), "KV_" + topo.Names.UniqueBucket()} {
		s, err := js.Stream(ctx, name)
		if err != nil {
			t.Fatalf("stream %s: %v", name, err)
		}
		out[name] = s.CachedInfo().Config
	}
	for _, p := range spool.Priorities {
		c, err := js.Consumer(ctx, topo.Names.TaskStream(), topo.Names.Consumer(p))
		if err != nil {
			t.Fatalf("consumer %s: %v", topo.Names.Consumer(p), err)
		}
		out[topo.Names.Consumer(p)] = c.CachedInfo().Config
	}
	c, err := js.Consumer(ctx, topo.Names.AdvisoryStream(), topo.Names.RouterConsumer())
	if err != nil {
		t.Fatalf("router consumer: %v", err)
	}
	out[topo.Names.RouterConsumer()] = c.CachedInfo().Config
	return out
}

func TestProvisionIsIdempotent(t *testing.T) {
	t.Parallel()
	_, js := startServer(t)
	ctx := ctxFor(t)
	topo := topology(t, "spool")
	topo.Settings.Consumers = streams.ConsumersByPriority
	if err := streams.Provision(ctx, js, topo, testLogger(t)); err != nil {
		t.Fatalf("first provision: %v", err)
	}
	first := snapshot(t, ctx, js, topo)
	if err := streams.Provision(ctx, js, topo, testLogger(t)); err != nil {
		t.Fatalf("second provision: %v", err)
	}
	// A nil logger is accepted (warnings go to standard error).
	if err := streams.Provision(ctx, js, topo, nil); err != nil {
		t.Fatalf("provision with a nil logger: %v", err)
	}
	second := snapshot(t, ctx, js, topo)
	for name, want := range first {
		if got := second[name]; !reflect.DeepEqual(got, want) {
			t.Errorf("%s changed on the second provision:\nfirst  %+v\nsecond %+v", name, want, got)
		}
	}
	tasks := first[topo.Names.TaskStream()].(jetstream.StreamConfig)
	if tasks.Retention != jetstream.WorkQueuePolicy || !tasks.AllowMsgSchedules || !tasks.AllowDirect ||
		tasks.MaxMsgs != -1 || tasks.MaxBytes != -1 || tasks.MaxMsgSize != 1<<20 || tasks.Storage != jetstream.FileStorage {
		t.Errorf("task stream config not as designed: %+v", tasks)
	}
	if tasks.SubjectDeleteMarkerTTL != 0 {
		t.Errorf("task stream must not set SubjectDeleteMarkerTTL, has %s", tasks.SubjectDeleteMarkerTTL)
	}
}

func TestProvisionRefusesConflictingStream(t *testing.T) {
	t.Parallel()
	_, js := startServer(t)
	ctx := ctxFor(t)
	topo := topology(t, "conflict")
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{
		Name:      topo.Names.TaskStream(),
		Subjects:  []string{"conflict.tasks.>"},
		Retention: jetstream.LimitsPolicy,
		Storage:   jetstream.FileStorage,
	}); err != nil {
		t.Fatal(err)
	}
	err := streams.Provision(ctx, js, topo, testLogger(t))
	if !errors.Is(err, streams.ErrConflict) {
		t.Fatalf("want ErrConflict, got %v", err)
	}
	for _, want := range []string{"CONFLICT_TASKS", "retention", "limits", "workqueue"} {
		if !containsFold(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
}

func TestProvisionRefusesConflictingStorage(t *testing.T) {
	t.Parallel()
	_, js := startServer(t)
	ctx := ctxFor(t)
	topo := topology(t, "store")
	if err := streams.Provision(ctx, js, topo, testLogger(t)); err != nil {
		t.Fatal(err)
	}
	mem := topo
	mem.Settings.Storage = "memory"
	err := streams.Provision(ctx, js, mem, testLogger(t))
	if !errors.Is(err, streams.ErrConflict) || !containsFold(err.Error(), "SPOOL_STORAGE") {
		t.Fatalf("want ErrConflict naming SPOOL_STORAGE, got %v", err)
	}
}

func TestRawPublishByPriority(t *testing.T) {
	t.Parallel()
	_, js := startServer(t)
	ctx := ctxFor(t)
	topo := topology(t, "spool")
	if err := streams.Provision(ctx, js, topo, testLogger(t)); err != nil {
		t.Fatal(err)
	}
	ack, err := js.Publish(ctx, "spool.tasks.high.x", []byte("payload"))
	if err != nil {
		t.Fatalf("publish to a known priority: %v", err)
	}
	if ack.Stream != "SPOOL_TASKS" {
		t.Fatalf("stored in %q", ack.Stream)
	}
	msg, err := js.Stream(ctx, "SPOOL_TASKS")
	if err != nil {
		t.Fatal(err)
	}
	got, err := msg.GetMsg(ctx, ack.Sequence)
	if err != nil || string(got.Data) != "payload" || got.Subject != "spool.tasks.high.x" {
		t.Fatalf("stored message %+v, %v", got, err)
	}

	// An unknown priority matches no stream: JetStream answers "no responders".
	_, err = js.Publish(ctx, "spool.tasks.bogus.x", []byte("payload"))
	if !errors.Is(err, jetstream.ErrNoStreamResponse) && !errors.Is(err, nats.ErrNoResponders) {
		t.Fatalf("publish to an unknown priority: want no stream response, got %v", err)
	}

	// A schedule targeting an unknown priority is refused at publish time.
	m := nats.NewMsg("spool.sched.t1")
	m.Header.Set(spool.HeaderSchedule, spool.FormatScheduleAt(time.Now().Add(time.Hour)))
	m.Header.Set(spool.HeaderScheduleTarget, "spool.tasks.bogus.x")
	if _, err := js.PublishMsg(ctx, m); err == nil {
		t.Fatal("schedule to an unknown priority was accepted")
	} else {
		t.Logf("schedule to an unknown priority refused: %v", err)
	}
}

func TestProvisionCluster(t *testing.T) {
	t.Parallel()
	js := startCluster(t, embedded.Options{Name: "prov"})
	ctx := ctxFor(t)
	names := spool.DefaultNames()
	topo, err := streams.New(names, streams.Settings{Replicas: 3})
	if err != nil {
		t.Fatal(err)
	}
	if err := streams.Provision(ctx, js, topo, testLogger(t)); err != nil {
		t.Fatalf("provision R3: %v", err)
	}
	for _, name := range []string{"SPOOL_TASKS", "SPOOL_DLQ", "SPOOL_ADVISORIES", "KV_spool_results", "KV_spool_unique"} {
		s, err := js.Stream(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		info := s.CachedInfo()
		if info.Config.Replicas != 3 {
			t.Errorf("%s has %d replicas", name, info.Config.Replicas)
		}
		if info.Cluster == nil || len(info.Cluster.Replicas) != 2 {
			t.Errorf("%s cluster info %+v: want a leader and 2 replicas", name, info.Cluster)
		}
	}
	if err := streams.Provision(ctx, js, topo, testLogger(t)); err != nil {
		t.Fatalf("second provision R3: %v", err)
	}
}

func containsFold(s, sub string) bool {
	return strings.Contains(strings.ToLower(s), strings.ToLower(sub))
}

// TestProvisionNarrowsBuckets: a deployment whose buckets nats.go created
// with roll-ups on is upgraded by provisioning: only the buckets with per-key
// TTL markers keep roll-ups, and every bucket bounds unused consumers.
func TestProvisionNarrowsBuckets(t *testing.T) {
	t.Parallel()
	_, js := startServer(t)
	ctx := ctxFor(t)
	topo := topology(t, "spool")
	buckets := []jetstream.KeyValueConfig{topo.ResultsConfig(), topo.UniqueConfig(), topo.CancelConfig(),
		topo.PausedConfig(), topo.LimitsConfig(), topo.LeasesConfig(), topo.WorkflowsConfig()}
	for _, cfg := range buckets {
		if _, err := js.CreateKeyValue(ctx, cfg); err != nil {
			t.Fatalf("creating bucket %s as nats.go does: %v", cfg.Bucket, err)
		}
	}
	for range 2 {
		if err := streams.Provision(ctx, js, topo, testLogger(t)); err != nil {
			t.Fatalf("provisioning: %v", err)
		}
		for _, cfg := range buckets {
			s, err := js.Stream(ctx, "KV_"+cfg.Bucket)
			if err != nil {
				t.Fatal(err)
			}
			got := s.CachedInfo().Config
			if want := cfg.LimitMarkerTTL > 0; got.AllowRollup != want {
				t.Errorf("bucket %s: allow_rollup_hdrs %v, want %v", cfg.Bucket, got.AllowRollup, want)
			}
			if got.ConsumerLimits.InactiveThreshold != streams.BucketConsumerInactivity {
				t.Errorf("bucket %s: consumer inactive threshold %s, want %s", cfg.Bucket,
					got.ConsumerLimits.InactiveThreshold, streams.BucketConsumerInactivity)
			}
		}
	}
	// A roll-up on a bucket without markers is refused.
	m := nats.NewMsg("$KV." + topo.Names.ResultsBucket() + ".x")
	m.Header.Set("Nats-Rollup", "all")
	if _, err := js.PublishMsg(ctx, m); err == nil {
		t.Fatal("a roll-up on the results bucket was stored")
	}
}

// A new deployment pulls by type: SPOOL_TASKS records it and provisioning
// makes no priority consumer. A stream that records no mode predates the
// setting: a provision that does not name the mode keeps it pulling by
// priority, and records that.
func TestProvisionDefaultConsumers(t *testing.T) {
	t.Parallel()
	_, js := startServer(t)
	ctx := ctxFor(t)
	fresh := topology(t, "fresh")
	if err := streams.Provision(ctx, js, fresh, testLogger(t)); err != nil {
		t.Fatal(err)
	}
	s, err := js.Stream(ctx, fresh.Names.TaskStream())
	if err != nil {
		t.Fatal(err)
	}
	if got := s.CachedInfo().Config.Metadata[streams.ConsumersKey]; got != streams.ConsumersByType {
		t.Errorf("a new deployment records %s %q, want %q", streams.ConsumersKey, got, streams.ConsumersByType)
	}
	for _, p := range spool.Priorities {
		if _, err := s.Consumer(ctx, fresh.Names.Consumer(p)); !errors.Is(err, jetstream.ErrConsumerNotFound) {
			t.Errorf("a new deployment has priority consumer %s (%v)", fresh.Names.Consumer(p), err)
		}
	}

	// An older deployment: pulling by priority, with no mode recorded.
	old := topology(t, "old")
	old.Settings.Consumers = streams.ConsumersByPriority
	if err := streams.Provision(ctx, js, old, testLogger(t)); err != nil {
		t.Fatal(err)
	}
	s, err = js.Stream(ctx, old.Names.TaskStream())
	if err != nil {
		t.Fatal(err)
	}
	cfg := s.CachedInfo().Config
	delete(cfg.Metadata, streams.ConsumersKey)
	if _, err := js.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	if err := streams.Provision(ctx, js, topology(t, "old"), testLogger(t)); err != nil {
		t.Fatal(err)
	}
	if s, err = js.Stream(ctx, old.Names.TaskStream()); err != nil {
		t.Fatal(err)
	}
	if got := s.CachedInfo().Config.Metadata[streams.ConsumersKey]; got != streams.ConsumersByPriority {
		t.Errorf("a stream that recorded no mode, provisioned again: %s %q, want %q", streams.ConsumersKey, got, streams.ConsumersByPriority)
	}
	for _, p := range spool.Priorities {
		if _, err := s.Consumer(ctx, old.Names.Consumer(p)); err != nil {
			t.Errorf("priority consumer %s of a stream that recorded no mode: %v", old.Names.Consumer(p), err)
		}
	}
}
