package dlqrouter_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/spoolq/spool/consumer/dlqrouter"
	spool "github.com/spoolq/spool/shared"
	"github.com/spoolq/spool/streams"
	"github.com/spoolq/spool/streams/streamstest"
)

// routerEnv is one embedded server with the Spool topology provisioned for
// fast crashes: two deliveries, one second of ack wait.
type routerEnv struct {
	url   string
	nc    *nats.Conn
	js    jetstream.JetStream
	names spool.Names
	topo  streams.Topology
}

func newRouterEnv(t *testing.T) *routerEnv {
	t.Helper()
	e := streamstest.Start(t, streams.Settings{MaxDeliver: 2, AckWait: time.Second, Consumers: streams.ConsumersByPriority})
	return &routerEnv{url: e.URL, nc: e.NC, js: e.JS, names: e.Names, topo: e.Topology}
}

// routerCtx bounds a test's I/O.
func routerCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 25*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// routerWaitFor polls cond until it holds, failing the test at the
// deadline with the last state cond reported.
func routerWaitFor(t *testing.T, timeout time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	streamstest.WaitFor(t, timeout, func() error {
		if ok, state := cond(); !ok {
			return fmt.Errorf("waiting for %s; last state: %s", what, state)
		}
		return nil
	})
}

// startRouter starts a router stopped (and checked) when t ends.
func (e *routerEnv) startRouter(t *testing.T, opts ...dlqrouter.Option) *dlqrouter.Router {
	t.Helper()
	opts = append([]dlqrouter.Option{
		dlqrouter.WithNames(e.names),
		dlqrouter.WithLogger(streamstest.Logger(t)),
		dlqrouter.WithFetchWait(500 * time.Millisecond),
		dlqrouter.WithRetryDelay(50 * time.Millisecond),
	}, opts...)
	r, err := dlqrouter.New(e.nc, opts...)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Start(routerCtx(t)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(t.Context()), 10*time.Second)
		defer cancel()
		if err := r.Stop(ctx); err != nil {
			t.Errorf("stopping router: %v", err)
		}
	})
	return r
}

// crashWorker pulls tasks of priority p and never settles them, as a worker
// that dies mid-task would, keeping a pull outstanding so the server emits
// the MAX_DELIVERIES advisory. It stops when t ends.
func (e *routerEnv) crashWorker(t *testing.T, p spool.Priority) {
	t.Helper()
	cons, err := e.js.Consumer(routerCtx(t), e.names.TaskStream(), e.names.Consumer(p))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.WithoutCancel(t.Context()))
	var wg sync.WaitGroup
	wg.Go(func() {
		for ctx.Err() == nil {
			fctx, fcancel := context.WithTimeout(ctx, 500*time.Millisecond)
			if b, err := cons.Fetch(16, jetstream.FetchContext(fctx)); err == nil {
				for range b.Messages() { // received, never acked: the worker "crashed"
				}
			}
			fcancel()
		}
	})
	t.Cleanup(func() { cancel(); wg.Wait() })
}

// publishTask publishes a task and returns its stream sequence.
func (e *routerEnv) publishTask(t *testing.T, subject string, h nats.Header, body []byte) uint64 {
	t.Helper()
	ack, err := e.js.PublishMsg(routerCtx(t), &nats.Msg{Subject: subject, Header: h, Data: body})
	if err != nil {
		t.Fatalf("publishing task to %s: %v", subject, err)
	}
	return ack.Sequence
}

// publishAdvisory publishes a MAX_DELIVERIES advisory as the server would.
func (e *routerEnv) publishAdvisory(t *testing.T, seq, deliveries uint64) {
	t.Helper()
	adv := map[string]any{
		"type":       "io.nats.jetstream.advisory.v1.max_deliver",
		"id":         "test-" + strconv.FormatUint(seq, 10),
		"timestamp":  time.Now().UTC(),
		"stream":     e.names.TaskStream(),
		"consumer":   e.names.Consumer(spool.Normal),
		"stream_seq": seq,
		"deliveries": deliveries,
	}
	b, err := json.Marshal(adv)
	if err != nil {
		t.Fatal(err)
	}
	e.publishRawAdvisory(t, b)
}

func (e *routerEnv) publishRawAdvisory(t *testing.T, body []byte) {
	t.Helper()
	subject := "$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES." + e.names.TaskStream() + "." + e.names.Consumer(spool.Normal)
	if _, err := e.js.Publish(routerCtx(t), subject, body); err != nil {
		t.Fatalf("publishing advisory: %v", err)
	}
}

// streamMsgs returns every message stored in stream, in order.
func (e *routerEnv) streamMsgs(t *testing.T, stream string) []*jetstream.RawStreamMsg {
	t.Helper()
	ctx := routerCtx(t)
	s, err := e.js.Stream(ctx, stream)
	if err != nil {
		t.Fatal(err)
	}
	st := s.CachedInfo().State
	var out []*jetstream.RawStreamMsg
	if st.Msgs == 0 {
		return nil
	}
	for seq := st.FirstSeq; seq <= st.LastSeq; seq++ {
		m, err := s.GetMsg(ctx, seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			t.Fatalf("reading %s seq %d: %v", stream, seq, err)
		}
		out = append(out, m)
	}
	return out
}

// msgCount returns how many messages stream holds.
func (e *routerEnv) msgCount(t *testing.T, stream string) uint64 {
	t.Helper()
	s, err := e.js.Stream(routerCtx(t), stream)
	if err != nil {
		t.Fatal(err)
	}
	return s.CachedInfo().State.Msgs
}

// idle reports whether the router consumer has nothing pending or unacked.
func (e *routerEnv) routerIdle(t *testing.T) (bool, string) {
	t.Helper()
	c, err := e.js.Consumer(routerCtx(t), e.names.AdvisoryStream(), e.names.RouterConsumer())
	if err != nil {
		t.Fatal(err)
	}
	info := c.CachedInfo()
	advisories := e.msgCount(t, e.names.AdvisoryStream())
	return info.NumPending == 0 && info.NumAckPending == 0 && advisories == 0,
		fmt.Sprintf("pending %d, ack pending %d, advisories stored %d", info.NumPending, info.NumAckPending, advisories)
}

func (e *routerEnv) result(t *testing.T, id string) (spool.Result, error) {
	t.Helper()
	kv, err := e.js.KeyValue(routerCtx(t), e.names.ResultsBucket())
	if err != nil {
		t.Fatal(err)
	}
	var doc spool.Result
	entry, err := kv.Get(routerCtx(t), id)
	if err != nil {
		return doc, err
	}
	if err := json.Unmarshal(entry.Value(), &doc); err != nil {
		t.Fatalf("result of %s: %v", id, err)
	}
	return doc, nil
}
