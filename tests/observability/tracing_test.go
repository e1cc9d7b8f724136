package observability_test

import (
	"context"
	"errors"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/goleak"

	"github.com/spoolq/spool/consumer"
	"github.com/spoolq/spool/consumer/tracing"
	"github.com/spoolq/spool/producer"
	spool "github.com/spoolq/spool/shared"
	"github.com/spoolq/spool/streams"
	"github.com/spoolq/spool/streams/streamstest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// A task enqueued by the producer under a caller's span is processed by a
// worker on another connection; every attempt span is a child of the enqueue
// span, in the caller's trace, linked only by the traceparent header.
func TestAttemptSpansAreChildrenOfTheEnqueueSpan(t *testing.T) {
	t.Parallel()
	env := streamstest.Start(t, streams.Settings{})
	ctx := streamstest.Context(t)

	// Two providers, as in two processes, recording into one recorder.
	rec := tracetest.NewSpanRecorder()
	producerTP := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	consumerTP := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() {
		_ = producerTP.Shutdown(context.Background())
		_ = consumerTP.Shutdown(context.Background())
	})

	mux := consumer.NewMux()
	mux.Use(tracing.Middleware(consumerTP))
	mux.HandleFunc("report.build", func(ctx context.Context, task *consumer.Task) ([]byte, error) {
		if task.Attempt < 2 {
			return nil, errors.New("not yet")
		}
		return []byte(`{"ok":true}`), nil
	})
	w, err := consumer.New(env.Connect(t), mux, consumer.WithLogger(streamstest.Logger(t)),
		consumer.WithRetry(10*time.Millisecond, 10*time.Millisecond, 3),
		consumer.WithPolling(100*time.Millisecond, 50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if err := w.Stop(sctx); err != nil {
			t.Error(err)
		}
	})

	client, err := producer.New(env.Connect(t), producer.WithLogger(streamstest.Logger(t)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(client.Close)
	traced := producer.Traced(client, producerTP)
	callerCtx, caller := producerTP.Tracer("caller").Start(ctx, "handle signup")
	res, err := traced.Enqueue(callerCtx, producer.Task{Type: "report.build"})
	caller.End()
	if err != nil {
		t.Fatal(err)
	}
	doc, err := client.Wait(ctx, res.ID)
	if err != nil || doc.State != spool.StateCompleted {
		t.Fatalf("result %+v, %v", doc, err)
	}

	var enqueue sdktrace.ReadOnlySpan
	var attempts []sdktrace.ReadOnlySpan
	streamstest.WaitFor(t, 5*time.Second, func() error {
		enqueue, attempts = nil, nil
		for _, s := range rec.Ended() {
			switch s.Name() {
			case "enqueue report.build":
				enqueue = s
			case "process report.build":
				attempts = append(attempts, s)
			}
		}
		if enqueue == nil || len(attempts) != 2 {
			return errors.New("spans not ended yet")
		}
		return nil
	})
	if enqueue.Parent().SpanID() != caller.SpanContext().SpanID() || enqueue.SpanKind() != trace.SpanKindProducer {
		t.Errorf("enqueue span: parent %v kind %v, want the caller's span", enqueue.Parent().SpanID(), enqueue.SpanKind())
	}
	for _, a := range attempts {
		if a.Parent().SpanID() != enqueue.SpanContext().SpanID() || a.SpanContext().TraceID() != caller.SpanContext().TraceID() {
			t.Errorf("attempt span %v: parent %v, want the enqueue span %v", a.SpanContext().SpanID(), a.Parent().SpanID(), enqueue.SpanContext().SpanID())
		}
		if a.SpanKind() != trace.SpanKindConsumer {
			t.Errorf("attempt span kind %v", a.SpanKind())
		}
	}
	if doc.TraceParent == "" {
		t.Error("the result document lacks the traceparent")
	}
}
