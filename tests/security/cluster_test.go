package security_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/url"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	spool "github.com/spoolq/spool/shared"
	"github.com/spoolq/spool/streams"
	"github.com/spoolq/spool/streams/streamstest"
)

// freePorts reserves n distinct loopback ports by listening and closing.
func freePorts(t *testing.T, n int) []int {
	t.Helper()
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports
}

// startAuthCluster starts cluster-n{1,2,3}-auth.conf on loopback, with their
// routes pointed at each other's random ports, and waits for the routes and
// a JetStream meta leader.
func startAuthCluster(t *testing.T) (urls []string, passwords map[string]string) {
	t.Helper()
	dir := copyConfigs(t)
	passwords = writeSecrets(t, dir)
	ports := freePorts(t, 6)
	var routes []*url.URL
	for i := range 3 {
		routes = append(routes, &url.URL{Scheme: "nats", Host: fmt.Sprintf("127.0.0.1:%d", ports[3+i])})
	}
	var servers []*server.Server
	for i := range 3 {
		file := filepath.Join(dir, fmt.Sprintf("cluster-n%d-auth.conf", i+1))
		opts, err := server.ProcessConfigFile(file)
		if err != nil {
			t.Fatalf("parsing %s: %v", file, err)
		}
		if len(opts.Routes) != 3 || opts.Cluster.Name != "spool" {
			t.Fatalf("%s: %d routes in cluster %q, want 3 in spool", file, len(opts.Routes), opts.Cluster.Name)
		}
		opts.Host, opts.Port = "127.0.0.1", ports[i]
		opts.HTTPHost, opts.HTTPPort = "", 0
		opts.Cluster.Host, opts.Cluster.Port = "127.0.0.1", ports[3+i]
		opts.Routes = routes
		opts.StoreDir = t.TempDir()
		opts.NoSigs, opts.NoLog = true, true
		s, err := server.NewServer(opts)
		if err != nil {
			t.Fatalf("new server from %s: %v", file, err)
		}
		s.Start()
		t.Cleanup(s.Shutdown)
		servers = append(servers, s)
		urls = append(urls, s.ClientURL())
	}
	for i, s := range servers {
		if !s.ReadyForConnections(waitTimeout) {
			t.Fatalf("node %d not accepting clients after %s", i+1, waitTimeout)
		}
	}
	streamstest.WaitFor(t, 30*time.Second, func() error {
		leaders := 0
		for i, s := range servers {
			if n := s.NumRoutes(); n < 2 {
				return fmt.Errorf("node %d has %d routes", i+1, n)
			}
			if !s.JetStreamIsCurrent() {
				return fmt.Errorf("node %d is not current with the meta leader", i+1)
			}
			if s.JetStreamIsLeader() {
				leaders++
				// R3 placement needs every peer's stats at the leader.
				if got := len(s.JetStreamClusterPeers()); got < len(servers) {
					return fmt.Errorf("meta leader knows %d usable peers, want %d", got, len(servers))
				}
			}
		}
		if leaders != 1 {
			return fmt.Errorf("%d meta leaders", leaders)
		}
		return nil
	})
	return urls, passwords
}

// TestClusterRoles runs the roles on the 3-node cluster configurations: the
// admin provisions R3, a producer on one node enqueues, a consumer on
// another pulls and acks, the system user sees all three servers, and the
// producer still cannot delete the stream.
func TestClusterRoles(t *testing.T) {
	t.Parallel()
	urls, passwords := startAuthCluster(t)
	connect := func(user string, node int) *client {
		return authServer{url: urls[node], passwords: passwords}.connect(t, user)
	}
	ctx := testContext(t)

	admin := connect("spool-admin", 0)
	topo, err := streams.New(names, streams.Settings{Replicas: 3})
	if err != nil {
		t.Fatal(err)
	}
	if err := streams.Provision(ctx, admin.js, topo, testLogger(t)); err != nil {
		t.Fatalf("provisioning R3 as spool-admin: %v", err)
	}
	info, err := admin.js.Stream(ctx, names.TaskStream())
	if err != nil {
		t.Fatal(err)
	}
	if r := info.CachedInfo().Config.Replicas; r != 3 {
		t.Fatalf("task stream has %d replicas, want 3", r)
	}

	producer := connect("spool-producer", 1)
	ack, err := producer.js.Publish(ctx, "spool.tasks.high.report", []byte("q3"))
	if err != nil {
		t.Fatalf("producer publishing on node 2: %v", err)
	}
	if ack.Stream != names.TaskStream() {
		t.Fatalf("stored in %q", ack.Stream)
	}

	consumer := connect("spool-consumer", 2)
	// The type consumer a worker of report makes, made and bound on node 3.
	stream, err := consumer.js.Stream(ctx, names.TaskStream())
	if err != nil {
		t.Fatal(err)
	}
	cfg := streams.TypeConsumerConfig(names, stream.CachedInfo().Config, spool.High, "report")
	cons, err := consumer.js.CreateConsumer(ctx, names.TaskStream(), cfg)
	if err != nil {
		t.Fatalf("consumer making %s on node 3: %v", cfg.Durable, err)
	}
	msg, err := cons.Next(jetstream.FetchMaxWait(waitTimeout))
	if err != nil {
		t.Fatalf("consumer fetching on node 3: %v", err)
	}
	if string(msg.Data()) != "q3" {
		t.Fatalf("fetched %q", msg.Data())
	}
	if err := msg.DoubleAck(ctx); err != nil {
		t.Fatalf("consumer acking: %v", err)
	}

	sys := connect("sys", 0)
	inbox := nats.NewInbox()
	sub, err := sys.nc.SubscribeSync(inbox)
	if err != nil {
		t.Fatal(err)
	}
	if err := sys.nc.PublishRequest("$SYS.REQ.SERVER.PING", inbox, nil); err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for len(seen) < 3 {
		m, err := sub.NextMsg(waitTimeout)
		if err != nil {
			t.Fatalf("system account saw %d servers: %v", len(seen), err)
		}
		var pong struct {
			Server struct {
				Name string `json:"name"`
			} `json:"server"`
		}
		if err := json.Unmarshal(m.Data, &pong); err != nil {
			t.Fatalf("PING reply %q: %v", m.Data, err)
		}
		seen[pong.Server.Name] = true
	}
	for _, want := range []string{"spool-n1", "spool-n2", "spool-n3"} {
		if !seen[want] {
			t.Errorf("no PING reply from %s (got %v)", want, seen)
		}
	}

	done := make(chan error, 1)
	delCtx, cancel := context.WithCancel(ctx)
	go func() { done <- producer.js.DeleteStream(delCtx, names.TaskStream()) }()
	producer.waitViolation(t, `Publish to "$JS.API.STREAM.DELETE.SPOOL_TASKS"`)
	cancel()
	if err := <-done; err == nil {
		t.Fatal("producer deleted the task stream on the cluster")
	} else if !errors.Is(err, context.Canceled) {
		t.Logf("delete returned %v", err)
	}
	for _, c := range []*client{admin, consumer, sys} {
		c.noViolation(t)
	}
}
