package producer_test

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/spoolq/spool/producer"
	spool "github.com/spoolq/spool/shared"
)

// The enqueue span is a child of the caller's span, or of the task's own
// traceparent, and the task carries the enqueue span's context.
func TestTracedEnqueue(t *testing.T) {
	t.Parallel()
	e := startEnv(t)
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	c := producer.Traced(e.client, tp)

	ctx, caller := tp.Tracer("test").Start(ctxFor(t), "caller")
	res, err := c.Enqueue(ctx, producer.Task{Type: "traced", Priority: new(spool.High), ID: "tr-1"})
	caller.End()
	if err != nil {
		t.Fatal(err)
	}
	other := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: trace.TraceID{1, 2, 3}, SpanID: trace.SpanID{4, 5, 6}, TraceFlags: trace.FlagsSampled,
	})
	carrier := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(trace.ContextWithSpanContext(context.Background(), other), carrier)
	batch, err := c.EnqueueBatch(ctxFor(t), []producer.Task{{Type: "traced", ID: "tr-2", TraceParent: carrier["traceparent"]}})
	if err != nil {
		t.Fatal(err)
	}
	seqs := map[string]uint64{"tr-1": res.Sequence, "tr-2": batch[0].Sequence}

	spans := map[string]sdktrace.ReadOnlySpan{}
	for _, s := range rec.Ended() {
		for _, kv := range s.Attributes() {
			if kv.Key == "spool.task.id" {
				spans[kv.Value.AsString()] = s
			}
		}
	}
	for id, parent := range map[string]trace.SpanContext{"tr-1": caller.SpanContext(), "tr-2": other} {
		s, ok := spans[id]
		if !ok {
			t.Fatalf("no enqueue span for %s", id)
		}
		if s.Name() != "enqueue traced" || s.SpanKind() != trace.SpanKindProducer {
			t.Errorf("%s: span %q kind %v", id, s.Name(), s.SpanKind())
		}
		if s.Parent().SpanID() != parent.SpanID() || s.SpanContext().TraceID() != parent.TraceID() {
			t.Errorf("%s: parent %v, want %v", id, s.Parent().SpanID(), parent.SpanID())
		}
		msg, err := e.tasks.GetMsg(ctxFor(t), seqs[id])
		if err != nil {
			t.Fatal(err)
		}
		got := propagation.TraceContext{}.Extract(context.Background(), propagation.MapCarrier{"traceparent": msg.Header.Get(spool.HeaderTraceParent)})
		if sc := trace.SpanContextFromContext(got); sc.SpanID() != s.SpanContext().SpanID() {
			t.Errorf("%s: task traceparent %q does not name the enqueue span %v", id, msg.Header.Get(spool.HeaderTraceParent), s.SpanContext().SpanID())
		}
	}
}
