package embedded

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// ClusterReadyTimeout bounds how long StartCluster waits for routes and a
// JetStream meta leader.
const ClusterReadyTimeout = 30 * time.Second

// Cluster is an in-process N-node JetStream cluster. Node i keeps its store
// under <StoreDir>/n<i>, so a stopped node restarts with its data.
type Cluster struct {
	mu      sync.Mutex
	opts    []*server.Options
	servers []*server.Server
	base    Options
}

// StartCluster starts n nodes named <Name>-<i> (default "spool-<i>") on
// pre-allocated client and route ports, every node given the same route list,
// and waits until the routes are up and a meta leader is elected.
func StartCluster(n int, o Options) (*Cluster, error) {
	if n < 1 {
		return nil, fmt.Errorf("cluster size %d must be at least 1", n)
	}
	if o.StoreDir == "" {
		return nil, errors.New("embedded cluster: StoreDir is required")
	}
	if o.Name == "" {
		o.Name = "spool"
	}
	ports, err := FreePorts(2 * n)
	if err != nil {
		return nil, err
	}
	host := o.Host
	if host == "" {
		host = "127.0.0.1"
	}
	routes := make([]*url.URL, n)
	for i := range n {
		routes[i] = &url.URL{Scheme: "nats", Host: fmt.Sprintf("%s:%d", host, ports[n+i])}
	}
	c := &Cluster{base: o}
	for i := range n {
		node := o
		node.Name = fmt.Sprintf("%s-%d", o.Name, i)
		node.Port = ports[i]
		node.StoreDir = filepath.Join(o.StoreDir, fmt.Sprintf("n%d", i))
		opts, err := node.serverOptions()
		if err != nil {
			return nil, err
		}
		opts.Cluster = server.ClusterOpts{
			Name: o.Name,
			Host: host,
			Port: ports[n+i],
		}
		opts.Routes = routes
		c.opts = append(c.opts, opts)
	}
	for _, opts := range c.opts {
		s, err := startServer(opts, o)
		if err != nil {
			c.Shutdown()
			return nil, err
		}
		c.servers = append(c.servers, s)
	}
	if err := c.WaitReady(ClusterReadyTimeout); err != nil {
		c.Shutdown()
		return nil, err
	}
	return c, nil
}

// FreePorts reserves n distinct loopback ports by listening and closing:
// ports for servers started later (a cluster's, or a node restarted on its
// old ports).
func FreePorts(n int) ([]int, error) {
	ports := make([]int, 0, n)
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("reserving a port: %w", err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// WaitReady waits until every running node has routes to the other running
// nodes and the cluster has a current JetStream meta leader that can place
// replicas on every running node.
func (c *Cluster) WaitReady(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		err := c.ready()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("embedded cluster not ready after %s: %w", timeout, err)
		}
		time.Sleep(25 * time.Millisecond)
	}
}

func (c *Cluster) ready() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	running := 0
	for _, s := range c.servers {
		if s != nil && s.Running() {
			running++
		}
	}
	leaders := 0
	for i, s := range c.servers {
		if s == nil || !s.Running() {
			continue
		}
		if got := s.NumRoutes(); got < running-1 {
			return fmt.Errorf("node %d has %d routes, want %d", i, got, running-1)
		}
		if s.JetStreamIsLeader() {
			leaders++
			// Placement needs every peer online with its stats received
			// by the leader, or R3 creation fails with "no suitable peers".
			if got := len(s.JetStreamClusterPeers()); got < running {
				return fmt.Errorf("meta leader (node %d) knows %d usable peers, want %d", i, got, running)
			}
		}
		if !s.JetStreamIsCurrent() {
			return fmt.Errorf("node %d is not current with the meta leader", i)
		}
	}
	if leaders != 1 {
		return fmt.Errorf("%d meta leaders", leaders)
	}
	return nil
}

// Servers returns the nodes; a stopped node's entry is still its old server.
func (c *Cluster) Servers() []*server.Server {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]*server.Server(nil), c.servers...)
}

// ClientURLs returns the comma-separated client URLs of every node, for
// nats.Connect.
func (c *Cluster) ClientURLs() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	urls := make([]string, len(c.opts))
	for i, o := range c.opts {
		urls[i] = fmt.Sprintf("nats://%s:%d", o.Host, o.Port)
	}
	return strings.Join(urls, ",")
}

// Stop shuts node i down and waits until it has stopped.
func (c *Cluster) Stop(i int) {
	c.mu.Lock()
	s := c.servers[i]
	c.mu.Unlock()
	s.Shutdown()
	s.WaitForShutdown()
}

// Restart starts node i again on its ports and store, then waits for the
// cluster to be ready.
func (c *Cluster) Restart(i int) error {
	c.mu.Lock()
	opts := c.opts[i].Clone()
	c.mu.Unlock()
	s, err := startServer(opts, c.base)
	if err != nil {
		return fmt.Errorf("restarting node %d: %w", i, err)
	}
	c.mu.Lock()
	c.servers[i] = s
	c.mu.Unlock()
	return c.WaitReady(ClusterReadyTimeout)
}

// Shutdown stops every node.
func (c *Cluster) Shutdown() {
	for _, s := range c.Servers() {
		if s != nil {
			s.Shutdown()
			s.WaitForShutdown()
		}
	}
}
