package consumer_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"

	"github.com/spoolq/spool/consumer"
	spool "github.com/spoolq/spool/shared"
	"github.com/spoolq/spool/streams"
	"github.com/spoolq/spool/streams/embedded"
	"github.com/spoolq/spool/streams/streamstest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, streamstest.ServerGoroutines()...)
}

// env is one embedded server with the Spool topology provisioned.
type env struct {
	t     testing.TB
	url   string
	nc    *nats.Conn
	js    jetstream.JetStream
	names spool.Names
	topo  streams.Topology
}

// newEnv starts an embedded JetStream server owned by t and provisions the
// default topology with settings s.
func newEnv(t testing.TB, s streams.Settings) *env {
	t.Helper()
	srv, err := embedded.Start(embedded.Options{StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Shutdown(); srv.WaitForShutdown() })
	return provisionEnv(t, srv.ClientURL(), s)
}

// newClusterEnv starts an embedded 3-node cluster owned by t and provisions
// the topology with three replicas.
func newClusterEnv(t testing.TB, s streams.Settings) *env {
	t.Helper()
	c, err := embedded.StartCluster(3, embedded.Options{StoreDir: t.TempDir(), Name: "consumer"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Shutdown)
	s.Replicas = 3
	return provisionEnv(t, c.ClientURLs(), s)
}

func provisionEnv(t testing.TB, url string, s streams.Settings) *env {
	t.Helper()
	var err error
	e := &env{t: t, url: url, names: spool.DefaultNames()}
	e.nc = e.connect()
	if e.js, err = jetstream.New(e.nc); err != nil {
		t.Fatal(err)
	}
	if e.topo, err = streams.New(e.names, s); err != nil {
		t.Fatal(err)
	}
	if err := streams.Provision(testCtx(t), e.js, e.topo, testLogger(t)); err != nil {
		t.Fatal(err)
	}
	return e
}

func (e *env) connect() *nats.Conn {
	e.t.Helper()
	nc, err := nats.Connect(e.url)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(nc.Close)
	return nc
}

func testLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelInfo}))
}

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// worker creates and starts a worker on its own connection; it is stopped
// when t ends (if the test did not stop it).
func (e *env) worker(h consumer.Handler, opts ...consumer.Option) *consumer.Worker {
	e.t.Helper()
	base := []consumer.Option{
		consumer.WithLogger(testLogger(e.t)),
		consumer.WithWorkerName("test-worker"),
		consumer.WithPolling(100*time.Millisecond, 50*time.Millisecond),
	}
	w, err := consumer.New(e.connect(), h, append(base, opts...)...)
	if err != nil {
		e.t.Fatal(err)
	}
	if err := w.Start(testCtx(e.t)); err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := w.Stop(ctx); err != nil {
			e.t.Errorf("stopping worker: %v", err)
		}
	})
	return w
}

// publish enqueues one task the way any NATS client can: subject, payload,
// optional headers. It returns the stream sequence.
func (e *env) publish(p spool.Priority, typ string, payload []byte, hdr nats.Header) uint64 {
	e.t.Helper()
	subject, err := e.names.TaskSubject(p, typ)
	if err != nil {
		e.t.Fatal(err)
	}
	m := &nats.Msg{Subject: subject, Data: payload, Header: hdr}
	ack, err := e.js.PublishMsg(testCtx(e.t), m)
	if err != nil {
		e.t.Fatalf("publishing %s: %v", subject, err)
	}
	return ack.Sequence
}

// publishID enqueues a task with a Spool-Task-Id.
func (e *env) publishID(p spool.Priority, typ, id string, payload []byte, extra map[string]string) uint64 {
	e.t.Helper()
	h := nats.Header{}
	h.Set(spool.HeaderTaskID, id)
	for k, v := range extra {
		h.Set(k, v)
	}
	return e.publish(p, typ, payload, h)
}

// publishMany enqueues n tasks of p asynchronously and waits for their acks.
func (e *env) publishMany(p spool.Priority, typ string, n int, payload func(i int) []byte) {
	e.t.Helper()
	subject, err := e.names.TaskSubject(p, typ)
	if err != nil {
		e.t.Fatal(err)
	}
	for i := range n {
		var data []byte
		if payload != nil {
			data = payload(i)
		}
		if _, err := e.js.PublishAsync(subject, data); err != nil {
			e.t.Fatal(err)
		}
	}
	select {
	case <-e.js.PublishAsyncComplete():
	case <-time.After(30 * time.Second):
		e.t.Fatal("publishing timed out")
	}
}

// result reads a result document; ok is false when there is none.
func (e *env) result(id string) (spool.Result, bool) {
	e.t.Helper()
	kv, err := e.js.KeyValue(testCtx(e.t), e.names.ResultsBucket())
	if err != nil {
		e.t.Fatal(err)
	}
	entry, err := kv.Get(testCtx(e.t), id)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return spool.Result{}, false
	}
	if err != nil {
		e.t.Fatal(err)
	}
	var doc spool.Result
	if err := json.Unmarshal(entry.Value(), &doc); err != nil {
		e.t.Fatal(err)
	}
	return doc, true
}

// waitResult waits until id's result document is in state.
func (e *env) waitResult(id string, state spool.State, timeout time.Duration) spool.Result {
	e.t.Helper()
	var doc spool.Result
	streamstest.WaitFor(e.t, timeout, func() error {
		var ok bool
		doc, ok = e.result(id)
		if !(ok && doc.State == state) {
			return errors.New("result " + id + " " + string(state))
		}
		return nil
	})
	return doc
}

// fetchOne takes one task of priority p with a plain fetch, as a worker
// that never settles nor heartbeats it would; the test fails when none
// comes.
func (e *env) fetchOne(p spool.Priority) jetstream.Msg {
	e.t.Helper()
	ctx := testCtx(e.t)
	cons, err := e.js.Consumer(ctx, e.names.TaskStream(), e.names.Consumer(p))
	if err != nil {
		e.t.Fatal(err)
	}
	batch, err := cons.Fetch(1, jetstream.FetchMaxWait(10*time.Second))
	if err != nil {
		e.t.Fatal(err)
	}
	m, ok := <-batch.Messages()
	if !ok {
		e.t.Fatalf("no delivery of a %s task: %v", p, batch.Error())
	}
	return m
}

// consumerInfo reads a priority consumer's state.
func (e *env) consumerInfo(p spool.Priority) *jetstream.ConsumerInfo {
	e.t.Helper()
	c, err := e.js.Consumer(testCtx(e.t), e.names.TaskStream(), e.names.Consumer(p))
	if err != nil {
		e.t.Fatal(err)
	}
	info, err := c.Info(testCtx(e.t))
	if err != nil {
		e.t.Fatal(err)
	}
	return info
}

// taskMsgs counts messages left in the task stream.
func (e *env) taskMsgs() uint64 {
	e.t.Helper()
	return e.partitionMsgs(0)
}

// partitionMsgs counts the messages of task partition k's stream.
func (e *env) partitionMsgs(k int) uint64 {
	e.t.Helper()
	return e.streamMsgs(e.names.PartitionStream(k))
}

// streamMsgs counts the messages of a stream.
func (e *env) streamMsgs(name string) uint64 {
	e.t.Helper()
	s, err := e.js.Stream(testCtx(e.t), name)
	if err != nil {
		e.t.Fatal(err)
	}
	info, err := s.Info(testCtx(e.t))
	if err != nil {
		e.t.Fatal(err)
	}
	return info.State.Msgs
}

// log is a concurrency-safe record of handler calls.
type log[T any] struct {
	mu    sync.Mutex
	items []T
}

func (l *log[T]) add(v T) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.items = append(l.items, v)
	return len(l.items)
}

func (l *log[T]) snapshot() []T {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]T(nil), l.items...)
}

func (l *log[T]) len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.items)
}

func itoa(i int) string { return strconv.Itoa(i) }

// resultWrites subscribes to every write of task id's result document: a
// plain subscription to the bucket's subject sees them all, where a KV
// watch may miss overwritten ones.
func (e *env) resultWrites(id string) *nats.Subscription {
	e.t.Helper()
	sub, err := e.nc.SubscribeSync("$KV." + e.names.ResultsBucket() + "." + id)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := e.nc.Flush(); err != nil {
		e.t.Fatal(err)
	}
	return sub
}

// nextWrites decodes the next n document writes of sub.
func nextWrites(t *testing.T, sub *nats.Subscription, n int) []spool.Result {
	t.Helper()
	var docs []spool.Result
	for len(docs) < n {
		m, err := sub.NextMsg(10 * time.Second)
		if err != nil {
			t.Fatalf("after %d document writes: %v", len(docs), err)
		}
		var d spool.Result
		if err := json.Unmarshal(m.Data, &d); err != nil {
			t.Fatal(err)
		}
		docs = append(docs, d)
	}
	return docs
}
