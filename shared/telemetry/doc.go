// Package telemetry sets up OpenTelemetry tracing for a Spool binary from
// the standard OTEL_ environment variables. Tracing is off unless
// OTEL_TRACES_EXPORTER or an OTLP endpoint (OTEL_EXPORTER_OTLP_ENDPOINT,
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) is set, and OTEL_SDK_DISABLED=true
// turns it off whatever else is set. The exporter is chosen by
// go.opentelemetry.io/contrib/exporters/autoexport: otlp (default; protocol
// from OTEL_EXPORTER_OTLP_PROTOCOL, http/protobuf unless told otherwise),
// console, or none. Sampling follows OTEL_TRACES_SAMPLER and the resource
// OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES.
//
// Only the binaries' main packages (spool-consumer, and spool-producer's
// broker) use this package; the libraries take a trace.TracerProvider and
// depend on the OpenTelemetry API alone. It lives in the shared module
// because both binaries need the same set-up and the producer and consumer
// modules never import each other.
package telemetry
