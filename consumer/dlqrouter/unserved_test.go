package dlqrouter_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/spoolq/spool/consumer/dlqrouter"
	spool "github.com/spoolq/spool/shared"
	"github.com/spoolq/spool/streams"
	"github.com/spoolq/spool/streams/streamstest"
)

// Where workers pull by type, a task whose type no worker serves is
// dead-lettered with reason unserved once it waited past the router's
// deadline; a task of a served type, as old, is left to its workers.
func TestUnservedDeadline(t *testing.T) {
	env := streamstest.Start(t, streams.Settings{Consumers: streams.ConsumersByType})
	e := &routerEnv{url: env.URL, nc: env.NC, js: env.JS, names: env.Names, topo: env.Topology}
	ctx := routerCtx(t)
	tasks := env.Stream(t, env.Names.TaskStream())
	cfg := streams.TypeConsumerConfig(env.Names, tasks.CachedInfo().Config, spool.Normal, "us.served")
	if _, err := tasks.CreateConsumer(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	h := nats.Header{}
	h.Set(spool.HeaderTaskID, "unserved-1")
	e.publishTask(t, "spool.tasks.normal.us.nobody", h, []byte(`{"n":1}`))
	h = nats.Header{}
	h.Set(spool.HeaderTaskID, "served-1")
	e.publishTask(t, "spool.tasks.normal.us.served", h, []byte(`{"n":2}`))

	// Cancelled while it waited: it goes without a dead letter.
	h = nats.Header{}
	h.Set(spool.HeaderTaskID, "cancelled-1")
	e.publishTask(t, "spool.tasks.normal.us.nobody", h, []byte(`{"n":3}`))
	// What a canceller writes last (docs/contract.md, cancelling a task).
	kv, err := env.JS.KeyValue(ctx, env.Names.ResultsBucket())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, "cancelled-1", []byte(`{"id":"cancelled-1","state":"cancelled","priority":"normal","type":"us.nobody","attempts":0,"cancelled_by":"test"}`)); err != nil {
		t.Fatal(err)
	}

	e.startRouter(t, dlqrouter.WithUnservedDeadline(time.Second))
	routerWaitFor(t, 20*time.Second, "the unserved task's dead letter", func() (bool, string) {
		res, err := e.result(t, "unserved-1")
		if err != nil {
			return false, err.Error()
		}
		return res.State == spool.StateDead && res.Reason == spool.ReasonUnserved, fmt.Sprintf("%s %s", res.State, res.Reason)
	})
	dead := e.streamMsgs(t, env.Names.DLQStream())
	if len(dead) != 1 || dead[0].Subject != "spool.dlq.normal.us.nobody" || dead[0].Header.Get(spool.HeaderReason) != string(spool.ReasonUnserved) {
		t.Fatalf("dead letters %d, want the one unserved task with its reason", len(dead))
	}
	routerWaitFor(t, 20*time.Second, "the cancelled task's removal", func() (bool, string) {
		n := e.msgCount(t, env.Names.TaskStream())
		return n == 1, fmt.Sprintf("%d tasks left, want the served one", n)
	})
	if res, err := e.result(t, "cancelled-1"); err != nil || res.State != spool.StateCancelled {
		t.Errorf("the cancelled task's result: %v %v, want cancelled", res.State, err)
	}
	if _, err := e.result(t, "served-1"); err == nil {
		t.Error("the served task has a result: it was swept")
	}
}

// Options refuse a deadline below a second.
func TestUnservedDeadlineOption(t *testing.T) {
	t.Parallel()
	e := &routerEnv{nc: &nats.Conn{}}
	for _, d := range []time.Duration{-time.Second, time.Millisecond} {
		if _, err := dlqrouter.New(e.nc, dlqrouter.WithUnservedDeadline(d)); err == nil {
			t.Errorf("WithUnservedDeadline(%s) accepted", d)
		}
	}
}
