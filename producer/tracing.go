package producer

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// TracerName is the instrumentation scope of Spool's spans.
const TracerName = "github.com/spoolq/spool"

// TracedClient is a Client whose Enqueue and EnqueueBatch run in an
// OpenTelemetry span ("enqueue <type>", kind producer) and carry that span's
// W3C trace context to the task (traceparent, tracestate), so that the
// consumer's attempt spans are its children. Every other method is the
// Client's.
//
// The span's parent is the span in ctx; without one, the task's own
// TraceParent (for instance the HTTP broker's caller's) is the parent.
type TracedClient struct {
	*Client
	tracer trace.Tracer
	prop   propagation.TraceContext
}

// Traced wraps c with spans from tp (an SDK provider set up in main, or a
// no-op one: the task then still carries the caller's trace context). The
// library uses the OpenTelemetry API only.
func Traced(c *Client, tp trace.TracerProvider) *TracedClient {
	return &TracedClient{Client: c, tracer: tp.Tracer(TracerName)}
}

// mapCarrier carries the trace context in and out of a Task.
type taskCarrier struct{ t *Task }

func (c taskCarrier) Get(key string) string {
	switch key {
	case "traceparent":
		return c.t.TraceParent
	case "tracestate":
		return c.t.TraceState
	}
	return ""
}

func (c taskCarrier) Set(key, value string) {
	switch key {
	case "traceparent":
		c.t.TraceParent = value
	case "tracestate":
		c.t.TraceState = value
	}
}

func (c taskCarrier) Keys() []string { return []string{"traceparent", "tracestate"} }

// start opens the enqueue span of task and writes its context into task.
func (c *TracedClient) start(ctx context.Context, task *Task) (context.Context, trace.Span) {
	if !trace.SpanContextFromContext(ctx).IsValid() && task.TraceParent != "" {
		ctx = c.prop.Extract(ctx, taskCarrier{task})
	}
	ctx, span := c.tracer.Start(ctx, "enqueue "+task.Type,
		trace.WithSpanKind(trace.SpanKindProducer),
		trace.WithAttributes(
			attribute.String("messaging.system", "nats"),
			attribute.String("messaging.operation.type", "send"),
			attribute.String("spool.task.type", task.Type),
			attribute.String("spool.task.priority", task.PriorityOrDefault().String()),
		))
	if span.SpanContext().IsValid() {
		c.prop.Inject(ctx, taskCarrier{task})
	}
	return ctx, span
}

func end(span trace.Span, res EnqueueResult, err error) {
	span.SetAttributes(attribute.String("spool.task.id", res.ID))
	if res.Subject != "" {
		span.SetAttributes(attribute.String("messaging.destination.name", res.Subject),
			attribute.Bool("spool.task.duplicate", res.Duplicate))
	}
	if res.Warning != "" {
		span.AddEvent("spool.warning", trace.WithAttributes(attribute.String("message", res.Warning)))
	}
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

// Enqueue is Client.Enqueue in a span.
func (c *TracedClient) Enqueue(ctx context.Context, task Task, opts ...EnqueueOption) (EnqueueResult, error) {
	for _, o := range opts {
		o(&task)
	}
	ctx, span := c.start(ctx, &task)
	res, err := c.Client.Enqueue(ctx, task)
	end(span, res, err)
	return res, err
}

// EnqueueBatch is Client.EnqueueBatch with one span per task.
func (c *TracedClient) EnqueueBatch(ctx context.Context, tasks []Task) ([]BatchResult, error) {
	spans := make([]trace.Span, len(tasks))
	traced := make([]Task, len(tasks))
	for i := range tasks {
		traced[i] = tasks[i]
		_, spans[i] = c.start(ctx, &traced[i])
	}
	results, err := c.Client.EnqueueBatch(ctx, traced)
	for i, span := range spans {
		var r BatchResult
		if i < len(results) {
			r = results[i]
		}
		e := r.Err
		if e == nil && i >= len(results) {
			e = err
		}
		end(span, r.EnqueueResult, e)
	}
	return results, err
}
