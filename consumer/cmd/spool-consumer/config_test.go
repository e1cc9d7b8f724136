package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spoolq/spool/consumer"
	"github.com/spoolq/spool/consumer/remote"
	"github.com/spoolq/spool/shared/config"
)

func writeFile(t *testing.T, content string) string {
	p := filepath.Join(t.TempDir(), "routes.json")
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestConfigLoad(t *testing.T) {
	tests := []struct {
		name    string
		env     map[string]string
		wantErr string // substring naming the variable; empty: valid
		check   func(t *testing.T, c *Config)
	}{
		{name: "defaults", check: func(t *testing.T, c *Config) {
			if c.ConcurrencyMin != 1 || c.ConcurrencyMax != 10 || c.weights != consumer.DefaultWeights() ||
				len(c.boost) != 3 || c.boost[2] != (consumer.BoostStep{After: 90 * time.Second, Factor: 2}) ||
				c.RetryBase != time.Second || c.RetryMax != 5*time.Minute || c.DefaultMaxRetries != 3 ||
				c.TaskTimeout != 30*time.Minute || c.ShutdownTimeout != 30*time.Second || c.WorkerName == "" {
				t.Errorf("defaults %+v", c)
			}
		}},
		{name: "partial weights", env: map[string]string{"SPOOL_WEIGHTS": "idle=0.5, critical=2"}, check: func(t *testing.T, c *Config) {
			if c.weights != (consumer.Weights{2, 0.7, 0.4, 0.2, 0.5}) {
				t.Errorf("weights %v", c.weights)
			}
		}},
		{name: "boost off", env: map[string]string{"SPOOL_BOOST": ""}, check: func(t *testing.T, c *Config) {
			if len(c.boost) != 0 {
				t.Errorf("boost %v", c.boost)
			}
		}},
		{name: "all partitions by default", check: func(t *testing.T, c *Config) {
			if c.partition != -1 {
				t.Errorf("partition %d, want -1 (all)", c.partition)
			}
		}},
		{name: "pinned partition", env: map[string]string{"SPOOL_PARTITION": "2"}, check: func(t *testing.T, c *Config) {
			if c.partition != 2 {
				t.Errorf("partition %d, want 2", c.partition)
			}
		}},
		{name: "bad partition", env: map[string]string{"SPOOL_PARTITION": "16"}, wantErr: "SPOOL_PARTITION: \"16\" must be all or a partition 0 to 15"},
		{name: "partition not a number", env: map[string]string{"SPOOL_PARTITION": "first"}, wantErr: "SPOOL_PARTITION"},
		{name: "bad weight", env: map[string]string{"SPOOL_WEIGHTS": "critical=0"}, wantErr: "SPOOL_WEIGHTS"},
		{name: "unknown priority", env: map[string]string{"SPOOL_WEIGHTS": "urgent=1"}, wantErr: "SPOOL_WEIGHTS"},
		{name: "boost order", env: map[string]string{"SPOOL_BOOST": "60s=2,30s=3"}, wantErr: "SPOOL_BOOST"},
		{name: "boost factor", env: map[string]string{"SPOOL_BOOST": "30s=0.5"}, wantErr: "SPOOL_BOOST"},
		{name: "max below min", env: map[string]string{"SPOOL_CONCURRENCY_MIN": "5", "SPOOL_CONCURRENCY_MAX": "2"}, wantErr: "SPOOL_CONCURRENCY_MAX"},
		{name: "retry max below base", env: map[string]string{"SPOOL_RETRY_BASE": "1m", "SPOOL_RETRY_MAX": "1s"}, wantErr: "SPOOL_RETRY_MAX"},
		{name: "timeout", env: map[string]string{"SPOOL_TASK_TIMEOUT": "0s"}, wantErr: "SPOOL_TASK_TIMEOUT"},
		{name: "not a duration", env: map[string]string{"SPOOL_SHUTDOWN_TIMEOUT": "soon"}, wantErr: "SHUTDOWN_TIMEOUT"},
		{name: "remote routes", env: map[string]string{"SPOOL_REMOTE_ROUTES": "billing.>=handlers.billing;concurrency=8;timeout=30s, img.*=handlers.{type}"}, check: func(t *testing.T, c *Config) {
			want := []remote.Route{{Pattern: "billing.>", Subject: "handlers.billing", Concurrency: 8, Timeout: 30 * time.Second}, {Pattern: "img.*", Subject: "handlers.{type}"}}
			if !slices.Equal(c.routes, want) {
				t.Errorf("routes %+v", c.routes)
			}
		}},
		{name: "remote routes file", env: map[string]string{"SPOOL_REMOTE_ROUTES": "a=h.a", "SPOOL_REMOTE_ROUTES_FILE": writeFile(t, `{"routes":[{"type":">","subject":"h.all","concurrency":2,"timeout":"5s"}]}`)}, check: func(t *testing.T, c *Config) {
			want := []remote.Route{{Pattern: "a", Subject: "h.a"}, {Pattern: ">", Subject: "h.all", Concurrency: 2, Timeout: 5 * time.Second}}
			if !slices.Equal(c.routes, want) {
				t.Errorf("routes %+v", c.routes)
			}
		}},
		{name: "route without subject", env: map[string]string{"SPOOL_REMOTE_ROUTES": "billing.>"}, wantErr: "SPOOL_REMOTE_ROUTES: \"billing.>\" is not"},
		{name: "route wildcard subject", env: map[string]string{"SPOOL_REMOTE_ROUTES": "a=h.*"}, wantErr: "SPOOL_REMOTE_ROUTES: route a: subject"},
		{name: "route bad pattern", env: map[string]string{"SPOOL_REMOTE_ROUTES": "a.>.b=h"}, wantErr: "SPOOL_REMOTE_ROUTES: route a.>.b: type pattern"},
		{name: "route bad concurrency", env: map[string]string{"SPOOL_REMOTE_ROUTES": "a=h;concurrency=-1"}, wantErr: "concurrency \"-1\""},
		{name: "route unknown setting", env: map[string]string{"SPOOL_REMOTE_ROUTES": "a=h;retries=2"}, wantErr: "unknown setting"},
		{name: "route twice", env: map[string]string{"SPOOL_REMOTE_ROUTES": "a=h,a=g"}, wantErr: "routed twice"},
		{name: "routes file unknown field", env: map[string]string{"SPOOL_REMOTE_ROUTES_FILE": writeFile(t, `{"routes":[{"type":"a","subject":"h","timeuot":"5s"}]}`)}, wantErr: "SPOOL_REMOTE_ROUTES_FILE"},
		{name: "routes file missing", env: map[string]string{"SPOOL_REMOTE_ROUTES_FILE": "/nonexistent/routes.json"}, wantErr: "SPOOL_REMOTE_ROUTES_FILE"},
		{name: "discarded results", env: map[string]string{"SPOOL_DISCARD_RESULTS": "metrics.push, cache.*,"}, check: func(t *testing.T, c *Config) {
			if !slices.Equal(c.discard, []string{"metrics.push", "cache.*"}) {
				t.Errorf("discard %q", c.discard)
			}
		}},
		{name: "discarded results bad pattern", env: map[string]string{"SPOOL_DISCARD_RESULTS": "a.>.b"}, wantErr: "SPOOL_DISCARD_RESULTS"},
		{name: "strict", env: map[string]string{"SPOOL_STRICT": "true", "SPOOL_WORKER_NAME": "w1"}, check: func(t *testing.T, c *Config) {
			if !c.Strict || c.WorkerName != "w1" {
				t.Errorf("%+v", c)
			}
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			var c Config
			err := config.Load(&c)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err %v, want one naming %s", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tc.check != nil {
				tc.check(t, &c)
			}
			if _, err := consumer.New(nil, consumer.NewMux(), c.Options()...); err == nil || !strings.Contains(err.Error(), "nil connection") {
				t.Errorf("options did not pass validation up to the connection check: %v", err)
			}
		})
	}
}

func TestVariablesAreKnown(t *testing.T) {
	t.Parallel()
	for _, k := range config.Keys(&Config{}) {
		if !slices.Contains(config.Known, k) {
			t.Errorf("%s is missing from config.Known: spool-consumer would warn that it is unknown", k)
		}
	}
}

func TestBadNumberIsOneLine(t *testing.T) {
	t.Setenv("SPOOL_CONCURRENCY_MAX", "abc")
	var c Config
	if err := config.Load(&c); err == nil || err.Error() != `SPOOL_CONCURRENCY_MAX: "abc" is not a whole number` {
		t.Fatalf("got %v", err)
	}
}
