package config_test

import (
	"os"
	"path/filepath"
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
		{map[string]string{"SPOOL_WORKERS": "many"}, "WORKERS"},
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
