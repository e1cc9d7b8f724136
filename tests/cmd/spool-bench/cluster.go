package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/spoolq/spool/streams/embedded"
)

// clusterSize is the number of nodes of the local cluster.
const clusterSize = 3

// clusterName names the local cluster; node i is <clusterName>-<i>.
const clusterName = "spool-bench"

// clusterReady bounds how long the harness waits for the cluster (or a
// restarted node) to be usable.
const clusterReady = time.Minute

// cluster is a local 3-node cluster: one child process per node, on
// loopback ports chosen once so a killed node restarts where it was.
type cluster struct {
	dir        string
	syncAlways bool
	mappings   string // -map of every node: src=dst;src=dst
	ports      []int  // client ports, then route ports
	nodes      []*serverProc
	// srv stands for the whole cluster in the scenario code: its URL lists
	// every node, its CPU is the sum of theirs.
	srv *serverProc
	log *slog.Logger
}

func startCluster(ctx context.Context, dir string, syncAlways bool, mappings string, log *slog.Logger) (*cluster, error) {
	ports, err := embedded.FreePorts(2 * clusterSize)
	if err != nil {
		return nil, err
	}
	c := &cluster{dir: dir, syncAlways: syncAlways, mappings: mappings, ports: ports, nodes: make([]*serverProc, clusterSize), log: log}
	for i := range clusterSize {
		if err := c.startNode(ctx, i); err != nil {
			c.stop()
			return nil, err
		}
	}
	urls := make([]string, clusterSize)
	for i, n := range c.nodes {
		urls[i] = n.url
	}
	c.srv = &serverProc{url: strings.Join(urls, ","), nodes: c.nodes}
	if err := c.waitMeta(ctx); err != nil {
		c.stop()
		return nil, err
	}
	return c, nil
}

// startNode starts (or restarts) node i.
func (c *cluster) startNode(ctx context.Context, i int) error {
	routes := make([]string, clusterSize)
	for j := range clusterSize {
		routes[j] = fmt.Sprintf("nats://127.0.0.1:%d", c.ports[clusterSize+j])
	}
	args := []string{"node", "-name", nodeName(i), "-dir", filepath.Join(c.dir, fmt.Sprintf("n%d", i)),
		"-port", strconv.Itoa(c.ports[i]), "-cluster-port", strconv.Itoa(c.ports[clusterSize+i]),
		"-routes", strings.Join(routes, ",")}
	if c.syncAlways {
		args = append(args, "-sync")
	}
	if c.mappings != "" {
		args = append(args, "-map", c.mappings)
	}
	p, err := startChildServer(ctx, args...)
	if err != nil {
		return fmt.Errorf("node %d: %w", i, err)
	}
	if c.nodes[i] == nil {
		c.nodes[i] = p
	} else {
		*c.nodes[i] = *p // the cluster's srv sees the new process
	}
	return nil
}

func nodeName(i int) string { return fmt.Sprintf("%s-%d", clusterName, i) }

// kill ends node i with SIGKILL and reaps it.
func (c *cluster) kill(i int) error {
	n := c.nodes[i]
	if err := n.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		return fmt.Errorf("killing node %d: %w", i, err)
	}
	_ = n.cmd.Wait()
	return nil
}

func (c *cluster) stop() {
	for i, n := range c.nodes {
		if n == nil || n.cmd.ProcessState != nil {
			continue
		}
		if err := n.stop(); err != nil {
			c.log.Warn("stopping a cluster node", "node", i, "error", err)
		}
	}
}

// waitMeta waits until the cluster places R3 streams: a JetStream account
// info answered through every node.
func (c *cluster) waitMeta(ctx context.Context) error {
	deadline := time.Now().Add(clusterReady)
	var last error
	for time.Now().Before(deadline) {
		last = c.metaOK(ctx)
		if last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	return fmt.Errorf("cluster not ready after %s: %w", clusterReady, last)
}

func (c *cluster) metaOK(ctx context.Context) error {
	for _, n := range c.nodes {
		nc, err := nats.Connect(n.url, nats.Name("spool-bench-probe"))
		if err != nil {
			return err
		}
		js, err := jetstream.New(nc)
		if err == nil {
			rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			_, err = js.AccountInfo(rctx)
			cancel()
		}
		nc.Close()
		if err != nil {
			return fmt.Errorf("%s: %w", n.url, err)
		}
	}
	return nil
}

// startChildServer starts a child that prints its URL on its first line and
// serves until its stdin closes.
func startChildServer(ctx context.Context, args ...string) (*serverProc, error) {
	cmd, err := childCmd(ctx, args...)
	if err != nil {
		return nil, err
	}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, fmt.Errorf("server stdin: %w", err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("server stdout: %w", err)
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting the server child: %w", err)
	}
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return nil, fmt.Errorf("reading the server URL: %w", err)
	}
	return &serverProc{cmd: cmd, stdin: stdin, url: strings.TrimSpace(line)}, nil
}

// nodeChild runs one cluster node (JetStream, file storage) and serves
// until stdin closes. The harness provisions the topology itself, with R3.
func nodeChild(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("node", flag.ContinueOnError)
	name := fs.String("name", "", "server name")
	dir := fs.String("dir", "", "store directory")
	port := fs.Int("port", 0, "client port")
	cport := fs.Int("cluster-port", 0, "route port")
	routes := fs.String("routes", "", "comma-separated route URLs of every node")
	syncAlways := fs.Bool("sync", false, "SyncAlways")
	mappings := fs.String("map", "", "subject mappings of the account: src=dst;src=dst")
	if err := fs.Parse(args); err != nil {
		return err
	}
	var rs []*url.URL
	for r := range strings.SplitSeq(*routes, ",") {
		u, err := url.Parse(r)
		if err != nil {
			return fmt.Errorf("route %q: %w", r, err)
		}
		rs = append(rs, u)
	}
	opts := &server.Options{
		ServerName: *name, Host: "127.0.0.1", Port: *port,
		JetStream: true, StoreDir: *dir, SyncAlways: *syncAlways,
		NoSigs: true, NoLog: true, MaxPayload: 8 << 20, DisableShortFirstPing: true,
		Cluster: server.ClusterOpts{Name: clusterName, Host: "127.0.0.1", Port: *cport},
		Routes:  rs,
	}
	s, err := server.NewServer(opts)
	if err != nil {
		return fmt.Errorf("creating the node: %w", err)
	}
	for m := range strings.SplitSeq(*mappings, ";") {
		if src, dst, ok := strings.Cut(m, "="); ok {
			if err := s.GlobalAccount().AddMapping(src, dst); err != nil {
				return fmt.Errorf("mapping %q: %w", m, err)
			}
		}
	}
	s.Start()
	defer func() {
		s.Shutdown()
		s.WaitForShutdown()
	}()
	if !s.ReadyForConnections(30 * time.Second) {
		return errors.New("node not ready for connections")
	}
	fmt.Println(s.ClientURL())
	// Profiling commands, as the single server takes them, until stdin
	// closes (the harness is done with this node) or ctx ends.
	done := make(chan struct{})
	go func() {
		serverCommands(os.Stdin, s)
		close(done)
	}()
	select {
	case <-done:
	case <-ctx.Done():
	}
	return nil
}
