package producer_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"

	"github.com/spoolq/spool/producer"
	spool "github.com/spoolq/spool/shared"
	"github.com/spoolq/spool/streams"
	"github.com/spoolq/spool/streams/embedded"
	"github.com/spoolq/spool/streams/streamstest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// env is one test's embedded server, provisioned, with a connection and a
// client on it.
type env struct {
	nc     *nats.Conn
	js     jetstream.JetStream
	client *producer.Client
	names  spool.Names
	tasks  jetstream.Stream
}

func testLogger(t testing.TB) *slog.Logger { return streamstest.Logger(t) }

func ctxFor(t testing.TB) context.Context { return streamstest.Context(t) }

// newEnv starts an embedded server owned by t, provisions Spool's topology
// with settings and returns a client on it.
func newEnv(t testing.TB, opts embedded.Options, settings streams.Settings, clientOpts ...producer.Option) *env {
	t.Helper()
	e := streamstest.StartWith(t, opts, settings)
	c, err := producer.New(e.NC, append([]producer.Option{producer.WithLogger(testLogger(t))}, clientOpts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return &env{nc: e.NC, js: e.JS, client: c, names: e.Names, tasks: e.Stream(t, e.Names.TaskStream())}
}

func startEnv(t testing.TB) *env {
	return newEnv(t, embedded.Options{}, streams.Settings{})
}

// subjectCount returns how many messages of the task stream match filter.
func (e *env) subjectCount(t testing.TB, filter string) uint64 {
	t.Helper()
	info, err := e.tasks.Info(ctxFor(t), jetstream.WithSubjectFilter(filter))
	if err != nil {
		t.Fatal(err)
	}
	var n uint64
	for _, c := range info.State.Subjects {
		n += c
	}
	return n
}

func (e *env) streamMsgs(t testing.TB) uint64 {
	t.Helper()
	info, err := e.tasks.Info(ctxFor(t))
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Msgs
}

// fetchOne pulls one task of priority p through its durable consumer,
// waiting at most expiry; nil when none arrived.
func (e *env) fetchOne(t testing.TB, p spool.Priority, expiry time.Duration) jetstream.Msg {
	t.Helper()
	ctx := ctxFor(t)
	cons, err := e.js.Consumer(ctx, e.names.TaskStream(), e.names.Consumer(p))
	if err != nil {
		t.Fatal(err)
	}
	batch, err := cons.Fetch(1, jetstream.FetchMaxWait(expiry))
	if err != nil {
		t.Fatal(err)
	}
	var got jetstream.Msg
	for m := range batch.Messages() {
		got = m
	}
	if err := batch.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) {
		t.Fatalf("fetch: %v", err)
	}
	return got
}

func (e *env) uniqueHolder(t testing.TB, key string) (string, bool) {
	t.Helper()
	ctx := ctxFor(t)
	kv, err := e.js.KeyValue(ctx, e.names.UniqueBucket())
	if err != nil {
		t.Fatal(err)
	}
	entry, err := kv.Get(ctx, spool.UniqueKVKey(key))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return "", false
	}
	if err != nil {
		t.Fatal(err)
	}
	return string(entry.Value()), true
}

// lookedUp has c look up the task stream, which it does once, by
// enqueueing a task.
func (e *env) lookedUp(t testing.TB, c *producer.Client) {
	t.Helper()
	if _, err := c.Enqueue(ctxFor(t), producer.NewTask("warmup", nil)); err != nil {
		t.Fatal(err)
	}
}

// shrinkMaxMsgSize lowers the task stream's max message size to n after
// the env's client looked the stream up: the server, not the client,
// refuses a bigger task.
func (e *env) shrinkMaxMsgSize(t testing.TB, n int32) {
	t.Helper()
	e.lookedUp(t, e.client)
	cfg := e.tasks.CachedInfo().Config
	cfg.MaxMsgSize = n
	if _, err := e.js.UpdateStream(ctxFor(t), cfg); err != nil {
		t.Fatal(err)
	}
}

// deleteTaskStream deletes the task stream after c looked it up.
func (e *env) deleteTaskStream(t testing.TB, c *producer.Client) {
	t.Helper()
	e.lookedUp(t, c)
	if err := e.js.DeleteStream(ctxFor(t), e.names.TaskStream()); err != nil {
		t.Fatal(err)
	}
}

func errorf(format string, a ...any) error { return fmt.Errorf(format, a...) }

func embeddedDefaults() embedded.Options { return embedded.Options{} }

func settingsDefaults() streams.Settings { return streams.Settings{} }

func asConflict(err error, target **producer.UniqueConflictError) bool { return errors.As(err, target) }
