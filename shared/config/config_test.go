package config_test

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/spoolq/spool/shared/config"
)

type spec struct {
	config.Common
	Workers int `envconfig:"WORKERS" default:"4"`
}

func TestLoadDefaults(t *testing.T) {
	// t.Setenv forbids t.Parallel: these tests own the process environment.
	for _, k := range []string{"SPOOL_NATS_URL", "SPOOL_PREFIX", "SPOOL_LOG_LEVEL", "SPOOL_LOG_FORMAT", "SPOOL_WORKERS"} {
		t.Setenv(k, "")
		os.Unsetenv(k)
	}
	var c spec
	if err := config.Load(&c); err != nil {
		t.Fatal(err)
	}
	if c.URL != "nats://127.0.0.1:4222" || c.Prefix != "spool" || c.LogLevel != "info" || c.LogFormat != "text" || c.Workers != 4 {
		t.Fatalf("defaults not applied: %+v", c)
	}
	if c.Names().TaskStream() != "SPOOL_TASKS" {
		t.Fatalf("names: %s", c.Names().TaskStream())
	}
}

func TestLoadErrorsNameTheVariable(t *testing.T) {
	creds := filepath.Join(t.TempDir(), "user.creds")
	if err := os.WriteFile(creds, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		env     map[string]string
		wantErr string
	}{
		{map[string]string{"SPOOL_LOG_FORMAT": "xml"}, "SPOOL_LOG_FORMAT"},
		{map[string]string{"SPOOL_LOG_LEVEL": "loud"}, "SPOOL_LOG_LEVEL"},
		{map[string]string{"SPOOL_PREFIX": "a.b"}, "SPOOL_PREFIX"},
		{map[string]string{"SPOOL_NATS_URL": "localhost:4222"}, "SPOOL_NATS_URL"},
		{map[string]string{"SPOOL_NATS_PASSWORD": "p"}, "SPOOL_NATS_PASSWORD"},
		{map[string]string{"SPOOL_NATS_TOKEN": "t", "SPOOL_NATS_CREDS": creds}, "at most one"},
		{map[string]string{"SPOOL_NATS_CREDS": "/does/not/exist.creds"}, "SPOOL_NATS_CREDS"},
		{map[string]string{"SPOOL_NATS_TLS_CERT": creds}, "SPOOL_NATS_TLS_KEY"},
		{map[string]string{"SPOOL_WORKERS": "many"}, `SPOOL_WORKERS: "many" is not a whole number`},
	}
	for _, tt := range tests {
		t.Run(tt.wantErr, func(t *testing.T) {
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			var c spec
			err := config.Load(&c)
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("env %v: want an error naming %q, got %v", tt.env, tt.wantErr, err)
			}
		})
	}
}

func TestUsageListsVariables(t *testing.T) {
	u := config.Usage(&spec{})
	for _, want := range []string{"SPOOL_NATS_URL", "SPOOL_PREFIX", "SPOOL_LOG_FORMAT", "SPOOL_WORKERS"} {
		if !strings.Contains(u, want) {
			t.Errorf("usage lacks %s:\n%s", want, u)
		}
	}
}

func TestLoadErrorIsOneLine(t *testing.T) {
	t.Setenv("SPOOL_WORKERS", "abc")
	var c spec
	err := config.Load(&c)
	if err == nil || err.Error() != `SPOOL_WORKERS: "abc" is not a whole number` {
		t.Fatalf("got %v", err)
	}
}

func TestWarningsNameTheClosestVariable(t *testing.T) {
	t.Parallel()
	got := config.Warnings([]string{"SPOOL_WORKERS=abc", "SPOOL_NATS_ULR=x", "SPOOL_PREFIX=spool", "HOME=/root", "SPOOL_CONCURENCY_MAX=3"})
	want := []string{
		"SPOOL_CONCURENCY_MAX is not a Spool variable and is ignored (did you mean SPOOL_CONCURRENCY_MAX?)",
		"SPOOL_NATS_ULR is not a Spool variable and is ignored (did you mean SPOOL_NATS_URL?)",
		"SPOOL_WORKERS is not a Spool variable and is ignored (did you mean SPOOL_WORKER_NAME?)",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestCommonVariablesAreKnown(t *testing.T) {
	t.Parallel()
	for _, k := range config.Keys(&config.Common{}) {
		if !slices.Contains(config.Known, k) {
			t.Errorf("%s is missing from config.Known", k)
		}
	}
}
