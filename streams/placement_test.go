package streams_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	spool "github.com/spoolq/spool/shared"
	"github.com/spoolq/spool/streams"
	"github.com/spoolq/spool/streams/embedded"
	"github.com/spoolq/spool/streams/streamstest"
)

// The results bucket takes a write for every task of every partition: on a
// 3-node cluster with one task stream, provisioning moves the bucket's
// leader off the server that leads the task stream. The test first puts
// both leaders on one server, then provisions again.
func TestProvisionPlacesResultsApartFromTasks(t *testing.T) {
	t.Parallel()
	names := spool.DefaultNames()
	js := startCluster(t, embedded.Options{Name: "place"})
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	topo, err := streams.New(names, streams.Settings{Replicas: 3, Consumers: streams.ConsumersByPriority})
	if err != nil {
		t.Fatal(err)
	}
	if err := streams.Provision(ctx, js, topo, testLogger(t)); err != nil {
		t.Fatal(err)
	}
	results := "KV_" + names.ResultsBucket()
	var tasks string
	streamstest.WaitFor(t, 10*time.Second, func() error {
		if tasks = leaderOf(ctx, t, js, names.TaskStream()); tasks == "" {
			return errors.New("the task stream has no leader")
		}
		return nil
	})
	body, err := json.Marshal(map[string]any{"placement": map[string]string{"preferred": tasks}})
	if err != nil {
		t.Fatal(err)
	}
	streamstest.WaitFor(t, 30*time.Second, func() error {
		l := leaderOf(ctx, t, js, results)
		if l == tasks {
			return nil
		}
		if l != "" {
			// Answered or not, the next look tells.
			_, _ = js.Conn().Request("$JS.API.STREAM.LEADER.STEPDOWN."+results, body, 2*time.Second)
		}
		return fmt.Errorf("results bucket led by %q, task stream by %q", l, tasks)
	})

	if err := streams.Provision(ctx, js, topo, testLogger(t)); err != nil {
		t.Fatal(err)
	}
	streamstest.WaitFor(t, 10*time.Second, func() error {
		if leaderOf(ctx, t, js, results) == "" || leaderOf(ctx, t, js, names.TaskStream()) == "" {
			return errors.New("a leader is missing")
		}
		return nil
	})
	if l, tl := leaderOf(ctx, t, js, results), leaderOf(ctx, t, js, names.TaskStream()); l == tl {
		t.Errorf("after provisioning, the results bucket is led by %q and the task stream by %q: want two servers", l, tl)
	}
}

// leaderOf is the server leading stream name, "" while none does or the
// cluster does not answer (an election may swallow the request).
func leaderOf(ctx context.Context, t *testing.T, js jetstream.JetStream, name string) string {
	t.Helper()
	rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	s, err := js.Stream(rctx, name)
	if err != nil {
		t.Logf("reading stream %s: %v", name, err)
		return ""
	}
	if ci := s.CachedInfo().Cluster; ci != nil {
		return ci.Leader
	}
	return ""
}
