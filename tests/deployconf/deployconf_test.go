package deployconf_test

import (
	"path/filepath"
	"testing"

	"github.com/nats-io/nats-server/v2/server"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func load(t *testing.T, name string) *server.Options {
	t.Helper()
	opts, err := server.ProcessConfigFile(filepath.Join("..", "..", "deploy", "nats", name))
	if err != nil {
		t.Fatalf("parsing %s: %v", name, err)
	}
	return opts
}

func TestSingleNodeIsDurable(t *testing.T) {
	t.Parallel()
	o := load(t, "single.conf")
	if !o.JetStream || !o.SyncAlways {
		t.Fatalf("single.conf: JetStream %v, sync always %v: want both on", o.JetStream, o.SyncAlways)
	}
	if o.Host != "127.0.0.1" {
		t.Errorf("single.conf listens on %q, want loopback by default", o.Host)
	}
}

func TestClusterNodes(t *testing.T) {
	t.Parallel()
	names := map[string]bool{}
	for _, f := range []string{"cluster-n1.conf", "cluster-n2.conf", "cluster-n3.conf"} {
		o := load(t, f)
		if !o.JetStream || !o.SyncAlways {
			t.Errorf("%s: JetStream %v, sync always %v: want both on", f, o.JetStream, o.SyncAlways)
		}
		if o.Cluster.Name != "spool" || len(o.Routes) != 3 {
			t.Errorf("%s: cluster %q with %d routes, want spool with 3", f, o.Cluster.Name, len(o.Routes))
		}
		if names[o.ServerName] {
			t.Errorf("%s repeats server name %q", f, o.ServerName)
		}
		names[o.ServerName] = true
	}
}
