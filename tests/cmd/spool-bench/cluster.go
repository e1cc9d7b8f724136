package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/spoolq/spool/producer"
	spool "github.com/spoolq/spool/shared"
	"github.com/spoolq/spool/streams"
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
	waitStdin(ctx)
	return nil
}

// waitStdin returns when stdin closes (the harness is done with this
// child) or ctx ends.
func waitStdin(ctx context.Context) {
	done := make(chan struct{})
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		close(done)
	}()
	select {
	case <-done:
	case <-ctx.Done():
	}
}

// clusterMode names the report section of the cluster scenario.
func clusterMode(syncAlways bool) string {
	if syncAlways {
		return "cluster R3, SyncAlways"
	}
	return "cluster R3, default sync"
}

// clusterConfig is cfg with the counts the cluster runs: a 3-node cluster
// on the same cores does a third of the work per core, so the counts of a
// mode are capped where the single-node run would take minutes, and no
// profiles are written.
func clusterConfig(cfg config, syncAlways bool) config {
	if syncAlways {
		cfg.batchN, cfg.processN = cfg.batchNAlw, cfg.processNAlw
	}
	cfg.queued = min(cfg.queued, 4*cfg.processN)
	// Profiles (-profile) are of one server's runs: the cluster stands for
	// three processes that take no profiling commands.
	cfg.profileDir = ""
	return cfg
}

// runCluster measures enqueue, processing, pickup and shares on a local
// 3-node cluster with R3 streams, raw against Spool, then the stall a
// leader change causes; the same scenario code as one server, pointed at
// the cluster.
func runCluster(ctx context.Context, cfg config, syncAlways bool, res *results, log *slog.Logger) error {
	mode := clusterMode(syncAlways)
	cfg = clusterConfig(cfg, syncAlways)
	b, cl, err := openCluster(ctx, cfg, syncAlways, mode, "", res, log)
	if err != nil {
		return err
	}
	defer b.close(cl)
	res.modes = append(res.modes, mode)
	steps := []struct {
		name string
		fn   func(context.Context) error
	}{
		{"enqueue", b.enqueue},
		{"processing", b.processing},
		{"pickup", b.pickup},
		{"shares", b.shares},
	}
	for run := 1; run <= cfg.runs; run++ {
		for _, s := range steps {
			b.log.Info("scenario", "name", s.name, "run", run)
			runtime.GC()
			if err := s.fn(ctx); err != nil {
				return fmt.Errorf("%s, %s, run %d: %w", mode, s.name, run, err)
			}
		}
		b.log.Info("scenario", "name", "leader change", "run", run)
		if err := b.leaderChange(ctx, cl); err != nil {
			return fmt.Errorf("%s, leader change, run %d: %w", mode, run, err)
		}
	}
	return b.purge(ctx)
}

// openCluster starts the cluster (its nodes with mappings, see nodeChild),
// provisions the default topology with R3 and returns a bench pointed at
// it.
func openCluster(ctx context.Context, cfg config, syncAlways bool, mode, mappings string, res *results, log *slog.Logger) (*bench, *cluster, error) {
	dir, err := os.MkdirTemp("", "spool-bench-cluster-")
	if err != nil {
		return nil, nil, fmt.Errorf("creating the store directory: %w", err)
	}
	log = log.With("sync", mode)
	cl, err := startCluster(ctx, dir, syncAlways, mappings, log)
	if err != nil {
		os.RemoveAll(dir)
		return nil, nil, err
	}
	fail := func(err error) (*bench, *cluster, error) {
		cl.stop()
		os.RemoveAll(dir)
		return nil, nil, err
	}
	nc, err := nats.Connect(cl.srv.url, nats.Name("spool-bench"), nats.MaxReconnects(-1))
	if err != nil {
		return fail(fmt.Errorf("connecting: %w", err))
	}
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(producer.DefaultPublishWindow))
	if err != nil {
		nc.Close()
		return fail(fmt.Errorf("opening JetStream: %w", err))
	}
	names := spool.DefaultNames()
	topo, err := streams.New(names, streams.Settings{Replicas: clusterSize})
	if err != nil {
		nc.Close()
		return fail(err)
	}
	pctx, cancel := context.WithTimeout(ctx, clusterReady)
	defer cancel()
	if err := streams.Provision(pctx, js, topo, slog.New(slog.DiscardHandler)); err != nil {
		nc.Close()
		return fail(fmt.Errorf("provisioning R%d: %w", clusterSize, err))
	}
	b := &bench{cfg: cfg, mode: mode, srv: cl.srv, nc: nc, js: js, names: names, topo: topo, res: res, log: log, backlogLoRate: map[string]float64{}}
	return b, cl, nil
}

func (b *bench) close(cl *cluster) {
	b.nc.Close()
	cl.stop()
	os.RemoveAll(cl.dir)
}

// streamLeader returns the node index of a stream's leader.
func (b *bench) streamLeader(ctx context.Context, stream string) (int, error) {
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	s, err := b.js.Stream(rctx, stream)
	if err != nil {
		return 0, fmt.Errorf("reading stream %s: %w", stream, err)
	}
	info := s.CachedInfo()
	if info.Cluster == nil {
		return 0, fmt.Errorf("stream %s has no cluster info", stream)
	}
	for i := range clusterSize {
		if info.Cluster.Leader == nodeName(i) {
			return i, nil
		}
	}
	return 0, fmt.Errorf("stream %s has no leader (%q)", stream, info.Cluster.Leader)
}

// waitCurrent waits until every stream (buckets included) has a leader
// and every replica is current: after a node restart the next measurement
// starts on a whole cluster.
func (b *bench) waitCurrent(ctx context.Context) error {
	deadline := time.Now().Add(clusterReady)
	var last string
	for time.Now().Before(deadline) {
		last = b.notCurrent(ctx)
		if last == "" {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
	return fmt.Errorf("cluster not current after %s: %s", clusterReady, last)
}

// notCurrent names a stream without a leader or with a replica behind, or
// returns "".
func (b *bench) notCurrent(ctx context.Context) string {
	rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	l := b.js.ListStreams(rctx)
	for info := range l.Info() {
		ci := info.Cluster
		if ci == nil || ci.Leader == "" || len(ci.Replicas) != clusterSize-1 {
			return fmt.Sprintf("stream %s: no leader or replicas missing", info.Config.Name)
		}
		for _, r := range ci.Replicas {
			if !r.Current || r.Offline {
				return fmt.Sprintf("stream %s: replica %s behind", info.Config.Name, r.Name)
			}
		}
	}
	if err := l.Err(); err != nil {
		return err.Error()
	}
	return ""
}

// ackWatch records when every ack of a task stream goes by: a core
// subscription on the ack subjects sees the acks of raw and Spool alike,
// without touching the consumer.
type ackWatch struct {
	nc    *nats.Conn
	sub   *nats.Subscription
	mu    sync.Mutex
	times []time.Time
}

func watchAcks(ctx context.Context, nodeURL, stream string) (*ackWatch, error) {
	nc, err := nats.Connect(nodeURL, nats.Name("spool-bench-acks"), nats.NoReconnect())
	if err != nil {
		return nil, fmt.Errorf("connecting the ack watcher: %w", err)
	}
	w := &ackWatch{nc: nc}
	w.sub, err = nc.Subscribe("$JS.ACK."+stream+".>", func(m *nats.Msg) {
		if len(m.Data) != 0 && !strings.HasPrefix(string(m.Data), "+ACK") {
			return // progress, nak or term: not a completion
		}
		now := time.Now()
		w.mu.Lock()
		w.times = append(w.times, now)
		w.mu.Unlock()
	})
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("subscribing to acks: %w", err)
	}
	fctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := nc.FlushWithContext(fctx); err != nil {
		nc.Close()
		return nil, fmt.Errorf("ack watcher: %w", err)
	}
	return w, nil
}

func (w *ackWatch) count() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.times)
}

// longestGap is the longest time without an ack from since on (the moment
// the leader changed) to the last ack.
func (w *ackWatch) longestGap(since time.Time) time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	var gap time.Duration
	last := since
	// From the change to the first ack after it, and between acks after.
	for _, t := range w.times {
		if t.Before(since) {
			continue
		}
		gap = max(gap, t.Sub(last))
		last = t
	}
	return gap
}

func (w *ackWatch) close() { w.nc.Close() }

// leaderChange drains queued tasks at concurrency 100 and, a quarter of the
// way in, moves the task stream's leader: a step-down
// ($JS.API.STREAM.LEADER.STEPDOWN), then a SIGKILL of the leader's node
// (restarted afterwards). The figure is the longest time between two task
// completions (acks) from the change on.
func (b *bench) leaderChange(ctx context.Context, cl *cluster) error {
	n := b.cfg.leaderN
	stream := b.names.TaskStream()
	kinds := []string{"step-down", "SIGKILL"}
	if !b.cfg.leaderKill {
		kinds = kinds[:1]
	}
	for _, kind := range kinds {
		row := "leader change, " + kind + " of the task stream leader: longest gap between completions (ms)"
		for _, variant := range []string{"raw", "spool"} {
			if err := b.waitCurrent(ctx); err != nil {
				return err
			}
			if err := b.purge(ctx); err != nil {
				return err
			}
			if err := b.fill(ctx, spool.Normal, n); err != nil {
				return err
			}
			leader, err := b.streamLeader(ctx, stream)
			if err != nil {
				return err
			}
			// Watch from a node that survives the change.
			w, err := watchAcks(ctx, cl.nodes[(leader+1)%clusterSize].url, stream)
			if err != nil {
				return err
			}
			var changed time.Time
			var changeErr error
			done := make(chan struct{})
			onReady := func() error {
				go func() {
					defer close(done)
					for w.count() < n/4 {
						select {
						case <-ctx.Done():
							changeErr = ctx.Err()
							return
						case <-time.After(time.Millisecond):
						}
					}
					changed = time.Now()
					if kind == "step-down" {
						changeErr = b.stepDown(ctx, stream)
					} else {
						changeErr = cl.kill(leader)
					}
				}()
				return nil
			}
			_, err = runConsume(ctx, b.srv, onReady, "-mode", variant, "-task", "drain", "-n", strconv.Itoa(n), "-conc", "100")
			<-done
			gap := w.longestGap(changed)
			w.close()
			if kind == "SIGKILL" {
				if rerr := cl.startNode(ctx, leader); rerr != nil {
					return errors.Join(err, rerr)
				}
			}
			if err := errors.Join(err, changeErr); err != nil {
				return fmt.Errorf("%s %s: %w", variant, kind, err)
			}
			b.add(row, variant, float64(gap.Microseconds())/1e3)
		}
	}
	return b.waitCurrent(ctx)
}

// stepDown asks a stream's leader to step down, retrying while the request
// goes unanswered (an election may swallow it).
func (b *bench) stepDown(ctx context.Context, stream string) error {
	var last error
	for range 10 {
		m, err := b.nc.RequestWithContext(ctx, "$JS.API.STREAM.LEADER.STEPDOWN."+stream, nil)
		if err == nil {
			var resp struct {
				Success bool `json:"success"`
				Error   *struct {
					Description string `json:"description"`
				} `json:"error"`
			}
			if err := json.Unmarshal(m.Data, &resp); err != nil {
				return fmt.Errorf("step-down reply: %w", err)
			}
			if resp.Success {
				return nil
			}
			if resp.Error != nil {
				return fmt.Errorf("step-down: %s", resp.Error.Description)
			}
		}
		last = err
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
	return fmt.Errorf("step-down of %s: %w", stream, last)
}

// clusterNote is a line of the method notes about the cluster sections.
func clusterNote() string {
	return "- **cluster R3**: three nats-server child processes on 127.0.0.1 (one cluster, routes between them), every stream and bucket R3 (`streams.Provision` with `Replicas: 3`); the same enqueue, processing, pickup and shares code as one server, connected to all three URLs; the server CPU is the sum of the three. **Leader change**: a drain at concurrency 100; a quarter of the way in, the task stream's leader steps down (`$JS.API.STREAM.LEADER.STEPDOWN`) or its node gets SIGKILL (restarted afterwards); the figure is the longest time between two acks from then on, seen by a core subscription on `$JS.ACK.<stream>.>` on a surviving node.\n"
}
