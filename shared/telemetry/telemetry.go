package telemetry

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"

	"github.com/spoolq/spool/shared/logging"
	"go.opentelemetry.io/contrib/exporters/autoexport"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// Config is what the OTEL_ variables say about tracing.
type Config struct {
	// Disabled is OTEL_SDK_DISABLED (default false).
	Disabled bool
	// Exporter is OTEL_TRACES_EXPORTER: otlp, console or none (default:
	// unset, which means otlp when an endpoint is set and off otherwise).
	Exporter string
	// Endpoint is OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, else
	// OTEL_EXPORTER_OTLP_ENDPOINT (default: unset).
	Endpoint string
}

// ConfigFromEnv reads the variables with getenv (os.Getenv), naming the
// variable at fault.
func ConfigFromEnv(getenv func(string) string) (Config, error) {
	var c Config
	if v := strings.TrimSpace(getenv("OTEL_SDK_DISABLED")); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return c, fmt.Errorf("OTEL_SDK_DISABLED: %q is not true or false", v)
		}
		c.Disabled = b
	}
	c.Exporter = strings.TrimSpace(getenv("OTEL_TRACES_EXPORTER"))
	switch c.Exporter {
	case "", "otlp", "console", "none":
	default:
		return c, fmt.Errorf("OTEL_TRACES_EXPORTER: %q is not otlp, console or none", c.Exporter)
	}
	c.Endpoint = strings.TrimSpace(getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"))
	if c.Endpoint == "" {
		c.Endpoint = strings.TrimSpace(getenv("OTEL_EXPORTER_OTLP_ENDPOINT"))
	}
	return c, nil
}

// Enabled reports whether spans are exported.
func (c Config) Enabled() bool {
	return !c.Disabled && c.Exporter != "none" && (c.Exporter != "" || c.Endpoint != "")
}

// Setup returns the TracerProvider for c, and the function that flushes and
// stops it (call it on shutdown, with a deadline). When tracing is off the
// provider is a no-op one: the libraries still pass trace context along.
func Setup(ctx context.Context, c Config, serviceName string, logger *slog.Logger) (trace.TracerProvider, func(context.Context) error, error) {
	logger = logging.OrDefault(logger)
	if !c.Enabled() {
		return noop.NewTracerProvider(), func(context.Context) error { return nil }, nil
	}
	exp, err := autoexport.NewSpanExporter(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("creating the trace exporter (OTEL_TRACES_EXPORTER %q): %w", c.Exporter, err)
	}
	res, err := resource.New(ctx,
		resource.WithAttributes(attribute.String("service.name", serviceName)),
		resource.WithFromEnv(), // OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES win
		resource.WithTelemetrySDK(),
	)
	if err != nil && !errors.Is(err, resource.ErrPartialResource) {
		return nil, nil, errors.Join(fmt.Errorf("OTEL_RESOURCE_ATTRIBUTES: %w", err), exp.Shutdown(ctx))
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	logger.Info("tracing on", "exporter", c.Exporter, "endpoint", c.Endpoint)
	return tp, tp.Shutdown, nil
}
