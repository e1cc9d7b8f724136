package httpapi_test

import (
	"context"
	"net/http"
	"strings"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/spoolq/spool/producer/httpapi"
	spool "github.com/spoolq/spool/shared"
	"github.com/spoolq/spool/streams/embedded"
)

// With a TracerProvider, an enqueue through the broker is a span, child of
// the caller's traceparent header, and the task carries that span.
func TestBrokerTracesEnqueue(t *testing.T) {
	t.Parallel()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	b := startBroker(t, embedded.Options{}, httpapi.Options{TracerProvider: tp})

	const caller = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	req, err := http.NewRequestWithContext(ctxFor(t), "POST", b.url+"/v1/tasks", strings.NewReader(`{"type":"traced","id":"bt-1"}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("traceparent", caller)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 201 {
		t.Fatalf("enqueue: %d", resp.StatusCode)
	}
	spans := rec.Ended()
	if len(spans) != 1 || spans[0].Name() != "enqueue traced" {
		t.Fatalf("spans %v", spans)
	}
	s := spans[0]
	if s.Parent().TraceID().String() != "0af7651916cd43dd8448eb211c80319c" || s.Parent().SpanID().String() != "b7ad6b7169203331" {
		t.Errorf("enqueue span parent %v, want the caller's", s.Parent())
	}
	msg, err := b.tasks.GetMsg(ctxFor(t), 1)
	if err != nil {
		t.Fatal(err)
	}
	want := "00-0af7651916cd43dd8448eb211c80319c-" + s.SpanContext().SpanID().String() + "-01"
	if got := msg.Header.Get(spool.HeaderTraceParent); got != want {
		t.Errorf("task traceparent %q, want the enqueue span %q", got, want)
	}
}
