package telemetry_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/spoolq/spool/shared/telemetry"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func TestConfigFromEnv(t *testing.T) {
	t.Parallel()
	tests := []struct {
		env     map[string]string
		enabled bool
		wantErr string
	}{
		{nil, false, ""},
		{map[string]string{"OTEL_TRACES_EXPORTER": "otlp"}, true, ""},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, true, ""},
		{map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:4318/v1/traces"}, true, ""},
		{map[string]string{"OTEL_TRACES_EXPORTER": "console", "OTEL_SDK_DISABLED": "true"}, false, ""},
		{map[string]string{"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://x"}, false, ""},
		{map[string]string{"OTEL_TRACES_EXPORTER": "jaeger"}, false, "OTEL_TRACES_EXPORTER"},
		{map[string]string{"OTEL_SDK_DISABLED": "maybe"}, false, "OTEL_SDK_DISABLED"},
	}
	for _, tt := range tests {
		c, err := telemetry.ConfigFromEnv(env(tt.env))
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("%v: err %v, want one naming %s", tt.env, err, tt.wantErr)
			}
			continue
		}
		if err != nil || c.Enabled() != tt.enabled {
			t.Errorf("%v: enabled %v (%v), want %v", tt.env, c.Enabled(), err, tt.enabled)
		}
	}
}

// With an OTLP endpoint, spans reach it over OTLP/HTTP.
func TestSetupExportsOverOTLP(t *testing.T) {
	var posts atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && r.URL.Path == "/v1/traces" {
			posts.Add(1)
		}
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/x-protobuf")
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(srv.Close)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", srv.URL)
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
	t.Setenv("OTEL_TRACES_EXPORTER", "")
	c, err := telemetry.ConfigFromEnv(func(k string) string {
		return map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": srv.URL}[k]
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	tp, shutdown, err := telemetry.Setup(ctx, c, "spool-test", slog.New(slog.NewTextHandler(t.Output(), nil)))
	if err != nil {
		t.Fatal(err)
	}
	_, span := tp.Tracer("test").Start(ctx, "hello")
	span.End()
	if err := shutdown(ctx); err != nil { // flushes
		t.Fatal(err)
	}
	if posts.Load() == 0 {
		t.Fatal("no span reached the OTLP endpoint")
	}
	srv.CloseClientConnections()
}

func TestSetupOffIsNoop(t *testing.T) {
	t.Parallel()
	tp, shutdown, err := telemetry.Setup(t.Context(), telemetry.Config{}, "x", slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	_, span := tp.Tracer("t").Start(t.Context(), "s")
	if span.SpanContext().IsValid() || span.IsRecording() {
		t.Error("tracing off records spans")
	}
	if err := shutdown(t.Context()); err != nil {
		t.Fatal(err)
	}
}
