// Package tracing is the OpenTelemetry middleware of Spool workers:
// Middleware runs each attempt in a span (kind consumer) that continues the
// trace the task carries in its W3C traceparent/tracestate headers, with the
// task's id, type, priority and attempt as attributes (the Attr… keys).
//
//	mux.Use(tracing.Middleware(tp))
//
// The package uses the OpenTelemetry API only: the TracerProvider comes from
// the caller (an SDK provider set up in main, or a no-op one).
package tracing
