package consumer_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/spoolq/spool/consumer"
	spool "github.com/spoolq/spool/shared"
	"github.com/spoolq/spool/streams"
)

// Each attempt is a span, child of the trace context the task carries,
// with the task's attributes and the handler's error.
func TestTracingMiddleware(t *testing.T) {
	t.Parallel()
	e := newEnv(t, streams.Settings{})
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })

	mux := consumer.NewMux()
	mux.Use(consumer.Tracing(tp))
	mux.HandleFunc("traced.flaky", func(ctx context.Context, task *consumer.Task) ([]byte, error) {
		if task.Attempt == 1 {
			return nil, errors.New("first attempt fails")
		}
		return []byte("ok"), nil
	})
	e.worker(mux, consumer.WithRetry(10*time.Millisecond, 10*time.Millisecond, 3))

	// The "enqueue" span of a producer, carried in traceparent.
	ctx, parent := tp.Tracer("test").Start(testCtx(t), "enqueue traced.flaky")
	hdr := nats.Header{}
	propagation.TraceContext{}.Inject(ctx, propagation.HeaderCarrier(hdr)) // writes Traceparent: any case is read
	parent.End()
	hdr.Set(spool.HeaderTaskID, "traced-1")
	e.publish(spool.High, "traced.flaky", []byte("x"), hdr)
	e.waitResult("traced-1", spool.StateCompleted, 15*time.Second)

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
			attrs["spool.task.priority"] != "high" || attrs["spool.task.attempt"] != itoa(i+1) {
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
