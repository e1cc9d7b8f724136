package tracing

import (
	"context"
	"strings"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/spoolq/spool/consumer"
)

// TracerName is the instrumentation scope of Spool's spans.
const TracerName = "github.com/spoolq/spool"

// Span attribute keys.
const (
	AttrTaskID      = attribute.Key("spool.task.id")
	AttrTaskType    = attribute.Key("spool.task.type")
	AttrPriority    = attribute.Key("spool.task.priority")
	AttrAttempt     = attribute.Key("spool.task.attempt")
	AttrMaxAttempts = attribute.Key("spool.task.max_attempts")
)

// Middleware returns middleware that runs each attempt in an OpenTelemetry span
// ("process <type>", kind consumer) from tp, a child of the trace context
// the task carries in its traceparent/tracestate headers (W3C). The span
// has the task's id, type, priority and attempt, and records the handler's
// error. The handler's ctx carries the span, so its own spans nest under it.
// tp comes from the caller (an SDK provider set up in main, or a no-op one):
// the library uses the OpenTelemetry API only.
func Middleware(tp trace.TracerProvider) consumer.Middleware {
	tracer := tp.Tracer(TracerName)
	prop := propagation.TraceContext{}
	return func(next consumer.Handler) consumer.Handler {
		return consumer.HandlerFunc(func(ctx context.Context, t *consumer.Task) ([]byte, error) {
			ctx = prop.Extract(ctx, headerCarrier(t.Headers))
			ctx, span := tracer.Start(ctx, "process "+t.Type,
				trace.WithSpanKind(trace.SpanKindConsumer),
				trace.WithAttributes(
					attribute.String("messaging.system", "nats"),
					attribute.String("messaging.operation.type", "process"),
					AttrTaskID.String(t.ID),
					AttrTaskType.String(t.Type),
					AttrPriority.String(t.Priority.String()),
					AttrAttempt.Int(t.Attempt),
					AttrMaxAttempts.Int(t.MaxAttempts),
				))
			defer span.End()
			out, err := next.ProcessTask(ctx, t)
			if err != nil {
				span.RecordError(err)
				span.SetStatus(codes.Error, err.Error())
				if consumer.IsPermanent(err) {
					span.SetAttributes(attribute.Bool("spool.task.permanent", true))
				}
			}
			return out, err
		})
	}
}

// headerCarrier reads W3C trace headers from task headers. nats.Header keys
// are case-sensitive; Spool writes traceparent in lower case, other
// publishers may not.
type headerCarrier nats.Header

var _ propagation.TextMapCarrier = headerCarrier(nil)

func (h headerCarrier) Get(key string) string {
	if v := h[key]; len(v) > 0 {
		return v[0]
	}
	for k, v := range h {
		if len(v) > 0 && strings.EqualFold(k, key) {
			return v[0]
		}
	}
	return ""
}

func (h headerCarrier) Set(key, value string) { h[key] = []string{value} }

func (h headerCarrier) Keys() []string {
	keys := make([]string, 0, len(h))
	for k := range h {
		keys = append(keys, k)
	}
	return keys
}
