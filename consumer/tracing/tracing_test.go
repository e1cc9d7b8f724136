package tracing_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/spoolq/spool/consumer"
	"github.com/spoolq/spool/consumer/tracing"
	spool "github.com/spoolq/spool/shared"
	"github.com/spoolq/spool/streams"
	"github.com/spoolq/spool/streams/streamstest"
)

// Each attempt is a span, child of the trace context the task carries,
// with the task's attributes and the handler's error.
func TestTracingMiddleware(t *testing.T) {
	t.Parallel()
	e := streamstest.Start(t, streams.Settings{})
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })

	mux := consumer.NewMux()
	mux.Use(tracing.Middleware(tp))
	mux.HandleFunc("traced.flaky", func(ctx context.Context, task *consumer.Task) ([]byte, error) {
		if task.Attempt == 1 {
			return nil, errors.New("first attempt fails")
		}
		return []byte("ok"), nil
	})
	startWorker(t, e, mux, consumer.WithRetry(10*time.Millisecond, 10*time.Millisecond, 3))

	// The "enqueue" span of a producer, carried in traceparent.
	ctx, parent := tp.Tracer("test").Start(streamstest.Context(t), "enqueue traced.flaky")
	hdr := nats.Header{}
	propagation.TraceContext{}.Inject(ctx, propagation.HeaderCarrier(hdr)) // writes Traceparent: any case is read
	parent.End()
	hdr.Set(spool.HeaderTaskID, "traced-1")
	publish(t, e, spool.High, "traced.flaky", []byte("x"), hdr)
	waitResult(t, e, "traced-1", spool.StateCompleted, 15*time.Second)

	var attempts []sdktrace.ReadOnlySpan
	for _, s := range rec.Ended() {
		if s.Name() == "process traced.flaky" {
			attempts = append(attempts, s)
		}
	}
	if len(attempts) != 2 {
		t.Fatalf("%d attempt spans, want 2", len(attempts))
	}
	for i, s := range attempts {
		if s.Parent().SpanID() != parent.SpanContext().SpanID() || s.SpanContext().TraceID() != parent.SpanContext().TraceID() {
			t.Errorf("attempt %d: parent %v, want the enqueue span %v", i+1, s.Parent().SpanID(), parent.SpanContext().SpanID())
		}
		attrs := map[string]string{}
		for _, kv := range s.Attributes() {
			attrs[string(kv.Key)] = kv.Value.Emit()
		}
		if attrs["spool.task.id"] != "traced-1" || attrs["spool.task.type"] != "traced.flaky" ||
			attrs["spool.task.priority"] != "high" || attrs["spool.task.attempt"] != strconv.Itoa(i+1) {
			t.Errorf("attempt %d attributes %v", i+1, attrs)
		}
	}
	if attempts[0].Status().Code != codes.Error || len(attempts[0].Events()) == 0 {
		t.Errorf("failed attempt: status %v, events %v", attempts[0].Status(), attempts[0].Events())
	}
	if attempts[1].Status().Code == codes.Error {
		t.Errorf("successful attempt has status %v", attempts[1].Status())
	}
}

// startWorker starts a worker on its own connection, stopped when t ends.
func startWorker(t *testing.T, e *streamstest.Env, h consumer.Handler, opts ...consumer.Option) {
	t.Helper()
	base := []consumer.Option{
		consumer.WithLogger(streamstest.Logger(t)),
		consumer.WithNames(e.Names),
		consumer.WithPolling(100*time.Millisecond, 50*time.Millisecond),
	}
	w, err := consumer.New(e.Connect(t), h, append(base, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(streamstest.Context(t)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(t.Context()), 30*time.Second)
		defer cancel()
		if err := w.Stop(ctx); err != nil {
			t.Errorf("stopping worker: %v", err)
		}
	})
}

// publish enqueues one task as any NATS client can.
func publish(t *testing.T, e *streamstest.Env, p spool.Priority, typ string, payload []byte, hdr nats.Header) {
	t.Helper()
	subject, err := e.Names.TaskSubject(p, typ)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.JS.PublishMsg(streamstest.Context(t), &nats.Msg{Subject: subject, Data: payload, Header: hdr}); err != nil {
		t.Fatalf("publishing %s: %v", subject, err)
	}
}

// waitResult waits until the result document of id is in state.
func waitResult(t *testing.T, e *streamstest.Env, id string, state spool.State, timeout time.Duration) {
	t.Helper()
	kv, err := e.JS.KeyValue(streamstest.Context(t), e.Names.ResultsBucket())
	if err != nil {
		t.Fatal(err)
	}
	streamstest.WaitFor(t, timeout, func() error {
		entry, err := kv.Get(streamstest.Context(t), id)
		if err != nil {
			return fmt.Errorf("result of %s: %w", id, err)
		}
		var doc spool.Result
		if err := json.Unmarshal(entry.Value(), &doc); err != nil {
			return err
		}
		if doc.State != state {
			return fmt.Errorf("result of %s is %s, want %s", id, doc.State, state)
		}
		return nil
	})
}
