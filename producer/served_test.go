package producer_test

import (
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/spoolq/spool/producer"
	spool "github.com/spoolq/spool/shared"
	"github.com/spoolq/spool/shared/fleet"
	"github.com/spoolq/spool/streams"
	"github.com/spoolq/spool/streams/embedded"
	"github.com/spoolq/spool/streams/streamstest"
)

// Where workers pull by type, a task whose type no type consumer matches
// is stored with a warning, by Enqueue, EnqueueBatch and EnqueueAsync;
// a served type gets none, and a consumer made later is seen at the next
// reading.
func TestEnqueueWarnsOfUnservedTypeByType(t *testing.T) {
	t.Parallel()
	e := newEnv(t, embedded.Options{}, streams.Settings{Consumers: streams.ConsumersByType})
	ctx := ctxFor(t)
	tasks := e.tasks
	// What a worker serving sv.a.* does: make its consumer, here of one
	// priority only.
	cfg := streams.TypeConsumerConfig(e.names, tasks.CachedInfo().Config, spool.High, "sv.a.*")
	if _, err := tasks.CreateConsumer(ctx, cfg); err != nil {
		t.Fatal(err)
	}

	res, err := e.client.Enqueue(ctx, producer.NewTask("sv.b", nil))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(res.Warning, `no worker serves type "sv.b" (workers serve sv.a.*)`) || res.Sequence == 0 {
		t.Errorf("unserved type: %+v", res)
	}
	if n := e.subjectCount(t, "spool.tasks.normal.sv.b"); n != 1 {
		t.Errorf("%d sv.b tasks stored, want the one warned of", n)
	}
	if res, err := e.client.Enqueue(ctx, producer.NewTask("sv.a.x", nil)); err != nil || res.Warning != "" {
		t.Errorf("served type: %+v, %v", res, err)
	}

	results, err := e.client.EnqueueBatch(ctx, []producer.Task{producer.NewTask("sv.a.y", nil), producer.NewTask("sv.b", nil), producer.NewTask("sv.b", nil)})
	if err != nil {
		t.Fatal(err)
	}
	if results[0].Warning != "" || results[1].Warning == "" || results[2].Warning != results[1].Warning {
		t.Errorf("batch warnings %q, %q, %q: want none for sv.a.y, one for each sv.b", results[0].Warning, results[1].Warning, results[2].Warning)
	}
	p, err := e.client.EnqueueAsync(ctx, producer.NewTask("sv.b", nil))
	if err != nil {
		t.Fatal(err)
	}
	if res, err := p.Wait(ctx); err != nil || res.Warning == "" {
		t.Errorf("EnqueueAsync: %+v, %v", res, err)
	}

	// A worker serving sv.b starts: a reading after ServedCheckEvery sees
	// its consumer.
	cfg = streams.TypeConsumerConfig(e.names, tasks.CachedInfo().Config, spool.Normal, "sv.b")
	if _, err := tasks.CreateConsumer(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	streamstest.WaitFor(t, 3*producer.ServedCheckEvery, func() error {
		res, err := e.client.Enqueue(ctx, producer.NewTask("sv.b", nil))
		if err != nil {
			t.Fatal(err)
		}
		if res.Warning != "" {
			return errorf("still warned: %s", res.Warning)
		}
		return nil
	})
}

// Where workers pull by priority, the running consumer processes' service
// metadata says what they serve; with none running the warning says so.
func TestEnqueueWarnsOfUnservedTypeByPriority(t *testing.T) {
	t.Parallel()
	e := newEnv(t, embedded.Options{}, streams.Settings{Consumers: streams.ConsumersByPriority})
	ctx := ctxFor(t)
	res, err := e.client.Enqueue(ctx, producer.NewTask("sv.y", nil))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(res.Warning, "no worker is running") || res.Sequence == 0 {
		t.Errorf("no fleet: %+v", res)
	}
	quiet, err := producer.New(e.nc, producer.WithLogger(testLogger(t)), producer.WithUnservedWarnings(false))
	if err != nil {
		t.Fatal(err)
	}
	if res, err := quiet.Enqueue(ctx, producer.NewTask("sv.y", nil)); err != nil || res.Warning != "" {
		t.Errorf("check turned off: %+v, %v", res, err)
	}

	nc := connectTo(t, e)
	svc, err := micro.AddService(nc, micro.Config{Name: fleet.ServiceName, Version: "0.0.1",
		Metadata: map[string]string{fleet.MetadataHandlers: "sv.x,sv.p.*"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = svc.Stop() })
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	// A new client reads the fleet at its first enqueue.
	c, err := producer.New(e.nc, producer.WithLogger(testLogger(t)))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for typ, want := range map[string]string{
		"sv.x":   "",
		"sv.p.q": "",
		"sv.y":   `no worker serves type "sv.y" (the 1 running serve sv.p.*, sv.x): its tasks will be dead-lettered with reason no_handler`,
	} {
		res, err := c.Enqueue(ctx, producer.NewTask(typ, nil))
		if err != nil || res.Warning != want {
			t.Errorf("%s: warning %q, %v; want %q", typ, res.Warning, err, want)
		}
	}
}

// A fleet that does not answer leaves the types served unknown: the task
// is stored without a warning, and the first enqueue waits for the check
// no longer than ServedCheckTimeout.
func TestEnqueueWarnsOfNothingUnknown(t *testing.T) {
	t.Parallel()
	e := newEnv(t, embedded.Options{}, streams.Settings{Consumers: streams.ConsumersByPriority})
	ctx := ctxFor(t)
	nc := connectTo(t, e)
	sub, err := nc.Subscribe("$SRV.PING."+fleet.ServiceName, func(*nats.Msg) {}) // listens, never answers
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	res, err := e.client.Enqueue(ctx, producer.NewTask("sv.y", nil))
	if err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); res.Warning != "" || took > producer.ServedCheckTimeout+2*time.Second {
		t.Errorf("unknown fleet: warning %q after %s", res.Warning, took)
	}
}

// connectTo opens another connection to e's server, closed when the test
// ends.
func connectTo(t *testing.T, e *env) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(e.nc.ConnectedUrl())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}
