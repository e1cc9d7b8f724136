package main

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hibiken/asynq"
)

// The peers scenario runs the processing, pickup and enqueue scenarios
// against asynq (github.com/hibiken/asynq) on a redis-server the harness
// starts, so the report shows Spool beside what users would pick instead.
// Its figures are recorded under the same rows as Spool's with the variant
// "asynq"; the default-sync section's Redis snapshots with its default
// RDB settings, the SyncAlways section's runs with appendfsync always.

const (
	// variantAsynq is the results variant of the asynq figures.
	variantAsynq = "asynq"
	// asynqQueue is asynq's default queue.
	asynqQueue = "default"
	// asynqEnqueuers is how many goroutines call Client.Enqueue in the
	// batch and fill runs: asynq has no batch or asynchronous enqueue, and
	// go-redis's default pool (10 connections per CPU) bounds what more
	// goroutines would add.
	asynqEnqueuers = 64
	// asynqFastPoll is the TaskCheckInterval of the second asynq pickup
	// row: an idle server then polls Redis every 5–15ms.
	asynqFastPoll = 10 * time.Millisecond
	// redisSave is redis-server's built-in snapshot rule (Redis 7), passed
	// explicitly so the report states what ran.
	redisSave = "3600 1 300 100 60 10000"
	// redisInstallHint is what the report prints when redis-server is not
	// on PATH.
	redisInstallHint = "redis-server is not installed (Debian/Ubuntu: `apt-get install redis-server`); the asynq rows were skipped"
)

// peerInfo is what the report says about the peer run.
type peerInfo struct {
	skipped string // why the peers scenario did not run; empty if it did
	redis   string // redis-server version
	asynq   string // asynq module version
}

// redisProc is a redis-server child on 127.0.0.1 with a random port. Its
// serverProc (url = host:port) lets runConsume read its CPU.
type redisProc struct {
	*serverProc
	done chan error // the process's exit
}

// redisArgs is the redis-server command line: no config file, data in
// dir, RDB snapshots by Redis's defaults, and with always the append-only
// file fsynced on every write as well.
func redisArgs(port int, dir string, always bool) []string {
	args := []string{
		"--bind", "127.0.0.1", "--port", strconv.Itoa(port), "--dir", dir,
		"--daemonize", "no", "--logfile", "", "--loglevel", "warning",
		"--save", redisSave,
	}
	if always {
		return append(args, "--appendonly", "yes", "--appendfsync", "always")
	}
	return append(args, "--appendonly", "no")
}

// startRedis starts redis-server (path) and waits until it answers PING;
// it tries three ports, since another process may take the free port it
// picked before redis-server binds it.
func startRedis(ctx context.Context, path, dir string, always bool) (*redisProc, error) {
	var err error
	for range 3 {
		var rp *redisProc
		if rp, err = startRedisOnce(ctx, path, dir, always); err == nil || ctx.Err() != nil {
			return rp, err
		}
	}
	return nil, fmt.Errorf("3 tries: %w", err)
}

func startRedisOnce(ctx context.Context, path, dir string, always bool) (*redisProc, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, path, redisArgs(port, dir, always)...)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting redis-server: %w", err)
	}
	rp := &redisProc{serverProc: &serverProc{cmd: cmd, url: net.JoinHostPort("127.0.0.1", strconv.Itoa(port))}, done: make(chan error, 1)}
	go func() { rp.done <- cmd.Wait() }()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if err := redisCommand(rp.url, "PING", "+PONG"); err == nil {
			return rp, nil
		} else if time.Now().After(deadline) {
			_ = rp.stop()
			return nil, fmt.Errorf("redis-server on %s did not answer PING within 10s: %w", rp.url, err)
		}
		select {
		case err := <-rp.done:
			return nil, fmt.Errorf("redis-server exited at start: %v", err)
		case <-ctx.Done():
			_ = rp.stop()
			return nil, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// stop asks redis-server to shut down (SIGTERM: it saves a snapshot
// first) and kills it after a minute.
func (r *redisProc) stop() error {
	_ = r.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-r.done:
		return err
	case <-time.After(time.Minute):
		_ = r.cmd.Process.Kill()
		return errors.New("redis-server did not stop")
	}
}

// freePort returns a TCP port free on 127.0.0.1 a moment ago.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("finding a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// redisCommand sends one inline command on a connection of its own and
// expects the one-line reply want.
func redisCommand(addr, cmd, want string) error {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Write([]byte(cmd + "\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if got := strings.TrimSpace(line); got != want {
		return fmt.Errorf("%s answered %q", cmd, got)
	}
	return nil
}

// redisVersion parses `redis-server --version` ("Redis server v=7.0.15
// sha=…"); the whole line if it has no v= field.
func redisVersion(out string) string {
	for f := range strings.FieldsSeq(out) {
		if v, ok := strings.CutPrefix(f, "v="); ok {
			return v
		}
	}
	return strings.TrimSpace(out)
}

// asynqVersion is the asynq module version built into this binary.
func asynqVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			if d.Path == "github.com/hibiken/asynq" {
				return d.Version
			}
		}
	}
	return "unknown"
}

// peer is one peers run: a fresh redis-server and the harness's asynq
// client.
type peer struct {
	b      *bench
	redis  *redisProc
	client *asynq.Client
	insp   *asynq.Inspector
	// opts are every task's options: results kept as long as Spool keeps
	// its result documents (asynq's Retention keeps the completed task).
	opts []asynq.Option
}

// peers runs the asynq scenarios; without redis-server it records why it
// skipped them and succeeds.
func (b *bench) peers(ctx context.Context) error {
	path, err := exec.LookPath("redis-server")
	if err != nil {
		b.res.peer.skipped = redisInstallHint
		b.log.Warn("peers skipped", "reason", redisInstallHint)
		return nil
	}
	if b.res.peer.redis == "" {
		out, err := exec.CommandContext(ctx, path, "--version").Output()
		if err != nil {
			return fmt.Errorf("redis-server --version: %w", err)
		}
		b.res.peer.redis, b.res.peer.asynq = redisVersion(string(out)), asynqVersion()
	}
	dir, err := os.MkdirTemp("", "spool-bench-redis-")
	if err != nil {
		return fmt.Errorf("creating the redis directory: %w", err)
	}
	defer os.RemoveAll(dir)
	rp, err := startRedis(ctx, path, dir, b.mode == "SyncAlways")
	if err != nil {
		return err
	}
	defer func() {
		if err := rp.stop(); err != nil {
			b.log.Warn("stopping redis-server", "error", err)
		}
	}()
	opt := asynq.RedisClientOpt{Addr: rp.url}
	p := &peer{b: b, redis: rp, client: asynq.NewClient(opt), insp: asynq.NewInspector(opt),
		opts: []asynq.Option{asynq.Retention(b.topo.Settings.ResultTTL)}}
	defer p.client.Close()
	defer p.insp.Close()
	for _, step := range []func(context.Context) error{p.enqueue, p.processing, p.pickup, p.bullmq} {
		runtime.GC()
		if err := step(ctx); err != nil {
			return fmt.Errorf("peers: %w", err)
		}
	}
	return nil
}

func (p *peer) add(row string, v float64) { p.b.add(row, variantAsynq, v) }

// enqueueMany enqueues n tasks from asynqEnqueuers goroutines.
func (p *peer) enqueueMany(ctx context.Context, n int, payload []byte) error {
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make([]error, asynqEnqueuers)
	for g := range asynqEnqueuers {
		wg.Go(func() {
			for next.Add(1) <= int64(n) {
				if _, err := p.client.EnqueueContext(ctx, asynq.NewTask("bench", payload), p.opts...); err != nil {
					errs[g] = fmt.Errorf("enqueueing: %w", err)
					return
				}
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// empty drops every task, pending and completed, between measurements
// (no asynq server runs then): FLUSHALL ASYNC frees them in a background
// thread at once, where asynq's Inspector deletes them in one Lua script
// that blocks Redis for seconds with 200,000 completed tasks, past
// go-redis's read timeout.
func (p *peer) empty() error {
	if err := redisCommand(p.redis.url, "FLUSHALL ASYNC", "+OK"); err != nil {
		return fmt.Errorf("emptying Redis: %w", err)
	}
	return nil
}

// enqueue: single Enqueue latency and the throughput of asynqEnqueuers
// goroutines calling Enqueue, 128-byte payloads as Spool's rows.
func (p *peer) enqueue(ctx context.Context) error {
	cfg := p.b.cfg
	payload := make([]byte, 128)
	samples := make([]time.Duration, 0, cfg.latencyN)
	for range cfg.latencyN {
		t0 := time.Now()
		if _, err := p.client.EnqueueContext(ctx, asynq.NewTask("bench", payload), p.opts...); err != nil {
			return fmt.Errorf("enqueueing: %w", err)
		}
		samples = append(samples, time.Since(t0))
	}
	var rep consumeReport
	quantiles(samples, &rep)
	p.add("enqueue: single task p50 (µs)", rep.P50us)
	p.add("enqueue: single task p99 (µs)", rep.P99us)
	if err := p.empty(); err != nil {
		return err
	}
	total := cfg.batchN
	if p.b.mode == "SyncAlways" {
		total = cfg.batchNAlw
	}
	runtime.GC()
	cpu0, srv0, t0 := selfCPU(), p.redis.cpu(), time.Now()
	if err := p.enqueueMany(ctx, total, payload); err != nil {
		return err
	}
	wall := time.Since(t0)
	n := float64(total)
	p.add("enqueue: batch throughput (tasks/s)", n/wall.Seconds())
	p.add("CPU per task: producer, batch enqueue (µs)", us(selfCPU()-cpu0)/n)
	p.add("CPU per task: server, batch enqueue (µs)", us(p.redis.cpu()-srv0)/n)
	return p.empty()
}

// topUp fills the queue up to n pending tasks.
func (p *peer) topUp(ctx context.Context, n int) error {
	queues, err := p.insp.Queues()
	if err != nil {
		return fmt.Errorf("listing the queues: %w", err)
	}
	have := 0
	if slices.Contains(queues, asynqQueue) { // none after empty
		info, err := p.insp.GetQueueInfo(asynqQueue)
		if err != nil {
			return fmt.Errorf("reading the queue: %w", err)
		}
		have = info.Pending
	}
	if have < n {
		return p.enqueueMany(ctx, n-have, []byte(`{"n":1}`))
	}
	return nil
}

// processing: the queue holds cfg.queued tasks; an asynq Server with
// Concurrency = Spool's slots and a no-op handler, in a consume child,
// processes as many as Spool's worker does.
func (p *peer) processing(ctx context.Context) error {
	cfg := p.b.cfg
	n := cfg.processN
	if p.b.mode == "SyncAlways" {
		n = cfg.processNAlw
	}
	for _, conc := range cfg.concs {
		if err := p.topUp(ctx, cfg.queued); err != nil {
			return err
		}
		runtime.GC()
		r, err := runConsume(ctx, p.redis.serverProc, nil, "-mode", "asynq", "-task", "drain",
			"-n", strconv.Itoa(n), "-conc", strconv.Itoa(conc))
		if err != nil {
			return err
		}
		tasks := float64(r.Tasks)
		cpu, srv := r.CPUus/tasks, r.ServerCPUus/tasks
		p.add(fmt.Sprintf("processing: %d queued, concurrency %d (tasks/s)", cfg.queued, conc), tasks/r.Seconds)
		p.add(fmt.Sprintf("CPU per task: consumer, concurrency %d (µs)", conc), cpu)
		p.add(fmt.Sprintf("CPU per task: server, processing at concurrency %d (µs)", conc), srv)
		p.add(fmt.Sprintf("CPU per task: consumer + server, concurrency %d (µs)", conc), cpu+srv)
		p.add(fmt.Sprintf("network writes per task: consumer, concurrency %d", conc), float64(r.Writes)/tasks)
	}
	return p.empty()
}

// pickup: tasks enqueued one at a time at cfg.pickupRate to an idle asynq
// Server of 256 workers; the payload carries the time the harness called
// Enqueue, the handler measures from it. Once with asynq's default
// TaskCheckInterval (an idle server polls every 0.5–1.5s) and once with
// asynqFastPoll, what a user who needs a short pickup would set.
func (p *peer) pickup(ctx context.Context) error {
	cfg := p.b.cfg
	publish := func() error {
		time.Sleep(200 * time.Millisecond) // as Spool's pickup: let the server start polling
		tick := time.NewTicker(time.Second / time.Duration(cfg.pickupRate))
		defer tick.Stop()
		for range cfg.pickupN {
			<-tick.C
			if _, err := p.client.EnqueueContext(ctx, asynq.NewTask("bench", stampPayload(time.Now())), p.opts...); err != nil {
				return fmt.Errorf("enqueueing: %w", err)
			}
		}
		return nil
	}
	rate := strconv.Itoa(cfg.pickupRate)
	for _, poll := range []time.Duration{0, asynqFastPoll} {
		if err := p.empty(); err != nil {
			return err
		}
		r, err := runConsume(ctx, p.redis.serverProc, publish, "-mode", "asynq", "-task", "pickup",
			"-n", strconv.Itoa(cfg.pickupN), "-conc", "256", "-asynq-poll", poll.String())
		if err != nil {
			return err
		}
		row := "pickup at " + rate + " tasks/s"
		if poll != 0 {
			row += ", asynq TaskCheckInterval " + poll.String()
		}
		p.add(row+": p50 (µs)", r.P50us)
		p.add(row+": p99 (µs)", r.P99us)
		p.add(row+": max (µs)", r.MaxUs)
	}
	return p.empty()
}

// stampPayload encodes t as the pickup payload (Unix nanoseconds, big
// endian); stampTime decodes it.
func stampPayload(t time.Time) []byte {
	return binary.BigEndian.AppendUint64(nil, uint64(t.UnixNano()))
}

func stampTime(b []byte) (time.Time, error) {
	if len(b) != 8 {
		return time.Time{}, fmt.Errorf("pickup payload of %d bytes, want 8", len(b))
	}
	return time.Unix(0, int64(binary.BigEndian.Uint64(b))), nil
}
