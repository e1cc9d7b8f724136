package faults_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	spool "github.com/spoolq/spool/shared"
	"github.com/spoolq/spool/streams"
	"github.com/spoolq/spool/streams/embedded"
	"github.com/spoolq/spool/tests/checker"
)

// ackWait is the AckWait of every scenario: short, so tasks of killed
// workers come back quickly.
const ackWait = 2 * time.Second

// names are the default names: the fault worker uses the default prefix.
var names = spool.DefaultNames()

// settings are the topology settings of the scenarios.
func settings(replicas int) streams.Settings {
	return streams.Settings{Replicas: replicas, AckWait: ackWait, DuplicateWindow: 2 * time.Minute}
}

func testLogger(t testing.TB, level slog.Level) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: level}))
}

// ctxFor returns a context ending after d or with the test.
func ctxFor(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), d)
	t.Cleanup(cancel)
	return ctx
}

// startServer starts one embedded JetStream server on store and port (0:
// any) and stops it when t ends. syncAlways is the durable setting
// (sync_interval: always): fsync before every ack.
func startServer(t testing.TB, store string, port int, syncAlways bool) *serverHandle {
	t.Helper()
	h := &serverHandle{t: t, opts: embedded.Options{
		Name:       "faults",
		Port:       port,
		StoreDir:   store,
		SyncAlways: syncAlways,
		Logger:     testLogger(t, slog.LevelWarn),
	}}
	h.start()
	t.Cleanup(h.stop)
	return h
}

// queue is where a scenario without server faults runs its tasks.
type queue struct {
	url      string
	settings streams.Settings
	label    string // appended to the scenario's row in the fault table
}

// startQueue starts the servers of a scenario whose faults are in the
// workers, not the servers: one embedded server (no fsync: the server does
// not fail, so fsync would prove nothing) in the bounded run; under soak a
// 3-node cluster with sync_interval: always and every stream, consumer and
// bucket at R3, the durable deployment the guarantees are stated for.
func startQueue(t testing.TB, name string) queue {
	t.Helper()
	if !soak() {
		srv := startServer(t, t.TempDir(), 0, false)
		return queue{url: srv.url, settings: settings(1)}
	}
	c, err := embedded.StartCluster(3, embedded.Options{Name: name, StoreDir: t.TempDir(), SyncAlways: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Shutdown)
	return queue{url: c.ClientURLs(), settings: settings(3), label: " R3 SyncAlways"}
}

// serverHandle is a single embedded server that can be stopped and
// restarted on the same port and store.
type serverHandle struct {
	t    testing.TB
	opts embedded.Options
	srv  *server.Server
	url  string
}

func (h *serverHandle) start() {
	h.t.Helper()
	s, err := embedded.Start(h.opts)
	if err != nil {
		h.t.Fatal(err)
	}
	h.srv = s
	h.url = s.ClientURL()
	if h.opts.Port == 0 {
		// Restart on the same port, so clients reconnect by themselves.
		h.opts.Port = s.Addr().(*net.TCPAddr).Port
	}
}

func (h *serverHandle) stop() {
	if h.srv != nil && h.srv.Running() {
		h.srv.Shutdown()
		h.srv.WaitForShutdown()
	}
}

// connect opens a connection that reconnects forever, closed when t ends.
func connect(t testing.TB, url, name string) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(url,
		nats.Name(name),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(100*time.Millisecond),
		nats.ReconnectBufSize(-1), // fail publishes while disconnected instead of buffering them
	)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// provision creates the topology through nc.
func provision(t testing.TB, nc *nats.Conn, s streams.Settings) jetstream.JetStream {
	t.Helper()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	topo, err := streams.New(names, s)
	if err != nil {
		t.Fatal(err)
	}
	if err := streams.Provision(ctxFor(t, time.Minute), js, topo, testLogger(t, slog.LevelWarn)); err != nil {
		t.Fatal(err)
	}
	return js
}

// poll calls cond every interval until it returns nil, and returns cond's
// last error when timeout passes or ctx ends first.
func poll(ctx context.Context, timeout, interval time.Duration, cond func() error) error {
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		err := cond()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("after %s: %w", timeout, err)
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			return fmt.Errorf("%w: %w", ctx.Err(), err)
		}
	}
}

// settle waits until no consumer has anything left to deliver or awaiting
// an ack, and returns the ids of the tasks still in the task stream then
// (none, unless the server kept acknowledged tasks; see leftovers). When
// the consumers do not settle in time the test fails, but goes on, so the
// checker still tells what became of the tasks.
func settle(t testing.TB, ctx context.Context, js jetstream.JetStream, timeout time.Duration) []string {
	t.Helper()
	if err := poll(ctx, timeout, 250*time.Millisecond, func() error { return idle(ctx, js) }); err != nil {
		t.Errorf("tasks did not settle: %v", err)
		return nil
	}
	ids, err := leftovers(ctx, js)
	if err != nil {
		t.Fatal(err)
	}
	return ids
}

// idle reports nil once no worker consumer (a priority's, or a type
// pattern's where workers pull by type) has a task to deliver or awaiting
// its ack (running, or in retry backoff), and the DLQ router has no
// MAX_DELIVERIES advisory left to act on.
func idle(ctx context.Context, js jetstream.JetStream) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	adv, err := js.Stream(ctx, names.AdvisoryStream())
	if err != nil {
		return err
	}
	if n := adv.CachedInfo().State.Msgs; n > 0 {
		return fmt.Errorf("%d MAX_DELIVERIES advisories for the DLQ router to handle", n)
	}
	s, err := js.Stream(ctx, names.TaskStream())
	if err != nil {
		return err
	}
	infos, err := workerConsumers(ctx, s)
	if err != nil {
		return err
	}
	for _, ci := range infos {
		if ci.NumPending > 0 || ci.NumAckPending > 0 {
			return fmt.Errorf("%s: %d tasks to deliver, %d awaiting an ack; %s", ci.Name, ci.NumPending, ci.NumAckPending,
				describe(ctx, s, s.CachedInfo().State.FirstSeq))
		}
	}
	return nil
}

// workerConsumers returns the infos of the consumers on the task stream:
// the five priority consumers, or the type consumers the workers made.
func workerConsumers(ctx context.Context, s jetstream.Stream) ([]*jetstream.ConsumerInfo, error) {
	var infos []*jetstream.ConsumerInfo
	list := s.ListConsumers(ctx)
	for ci := range list.Info() {
		infos = append(infos, ci)
	}
	if err := list.Err(); err != nil {
		return nil, fmt.Errorf("listing the consumers of %s: %w", names.TaskStream(), err)
	}
	return infos, nil
}

// leftovers returns the task ids of the messages still in the task stream.
// With every consumer idle there should be none: WorkQueue retention
// removes a task when it is acked or terminated.
func leftovers(ctx context.Context, js jetstream.JetStream) ([]string, error) {
	s, err := js.Stream(ctx, names.TaskStream())
	if err != nil {
		return nil, err
	}
	info, err := s.Info(ctx)
	if err != nil {
		return nil, err
	}
	var ids []string
	for seq := info.State.FirstSeq; uint64(len(ids)) < info.State.Msgs; {
		// The next message at or after seq on any subject.
		m, err := s.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(">"))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			break
		}
		if err != nil {
			return nil, err
		}
		ids = append(ids, fmt.Sprintf("%s (seq %d)", m.Header.Get(spool.HeaderTaskID), m.Sequence))
		seq = m.Sequence + 1
	}
	return ids, nil
}

// describe tells what the consumers know, and what the oldest task is, to
// explain a task that does not settle.
func describe(ctx context.Context, s jetstream.Stream, first uint64) string {
	var b strings.Builder
	infos, err := workerConsumers(ctx, s)
	if err != nil {
		fmt.Fprintf(&b, "%v; ", err)
	}
	for _, ci := range infos {
		fmt.Fprintf(&b, "%s: pending %d, ack pending %d, redelivered %d, waiting pulls %d, delivered stream seq %d, ack floor stream seq %d; ",
			ci.Name, ci.NumPending, ci.NumAckPending, ci.NumRedelivered, ci.NumWaiting, ci.Delivered.Stream, ci.AckFloor.Stream)
	}
	if m, err := s.GetMsg(ctx, first); err == nil {
		fmt.Fprintf(&b, "oldest: seq %d subject %s time %s headers %v", m.Sequence, m.Subject, m.Time.Format(time.RFC3339Nano), m.Header)
	} else {
		fmt.Fprintf(&b, "oldest: %v", err)
	}
	return b.String()
}

// collect reads the results bucket and the dead-letter stream into chk.
func collect(t testing.TB, js jetstream.JetStream, chk *checker.Checker) {
	t.Helper()
	ctx := ctxFor(t, 2*time.Minute)
	n, err := checker.LoadResults(ctx, js, names, chk)
	if err != nil {
		t.Fatal(err)
	}
	// The watch may have been served by a replica that lags (a restarted
	// node's): what it lacks or shows unfinished is asked of the bucket's
	// leader.
	if missing := chk.Unresolved(); len(missing) > 0 {
		found, err := checker.LoadResultsAtLeader(ctx, js, names, chk, missing)
		if err != nil {
			t.Fatal(err)
		}
		if found > 0 {
			t.Logf("read %d documents the results watch missed or showed unfinished at the bucket's leader (a lagging replica may have served the watch)", found)
		}
		n += found
	}
	d, err := checker.LoadDeadLetters(ctx, js, names, chk)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("read %d result documents and %d dead letters", n, d)
}

// report checks chk, logs the row, adds it to the summary and fails the
// test on a lost, stuck, phantom or corrupted task. lingering are the
// tasks settle found left in the task stream.
func report(t testing.TB, scenario, faults string, start time.Time, chk *checker.Checker, lingering []string) checker.Report {
	t.Helper()
	r := chk.Check()
	row := checker.Row{Scenario: scenario, Report: r, Faults: faults, Lingering: len(lingering), Wall: time.Since(start)}
	summary.Add(row)
	var one checker.Table
	one.Add(row)
	t.Logf("\n%s", one.String())
	if err := r.Err(); err != nil {
		t.Error(err)
	}
	if len(lingering) > 0 {
		// Seen on nats-server 2.15.2 after server restarts and leader
		// changes: tasks whose ack the consumer recorded (its ack floor is
		// past them) stay in the WorkQueue stream and are never delivered
		// again. The check above proves each one ran and has its terminal
		// result, so nothing is lost; but they show as backlog.
		t.Logf("the server kept %d acknowledged tasks in %s: %v", len(lingering), names.TaskStream(), lingering)
	}
	if r.Unconfirmed > 0 {
		t.Logf("%d publishes without an ack, %d of them ran anyway", r.Unconfirmed, r.Recovered)
	}
	return r
}
