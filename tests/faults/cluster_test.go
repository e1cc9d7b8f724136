package faults_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	spool "github.com/spoolq/spool/shared"
	"github.com/spoolq/spool/streams"
	"github.com/spoolq/spool/streams/embedded"
	"github.com/spoolq/spool/streams/streamstest"
	"github.com/spoolq/spool/tests/checker"
)

// TestNodeLoss runs a 3-node in-process cluster (sync_interval: always)
// with every stream, consumer and bucket at R3. Mid-run it stops the task
// stream's leader, waits for a new one, restarts the node; then does the
// same to a priority consumer's leader. Producers and fault workers keep
// going through it; nothing acknowledged may be lost.
func TestNodeLoss(t *testing.T) {
	n := scale(4_000)
	start := time.Now()
	// The nodes' warnings, shown with a loss (see explainLoss).
	srvLog := newServerLog()
	c, err := embedded.StartCluster(3, embedded.Options{Name: "faults", StoreDir: t.TempDir(), SyncAlways: true, Logger: srvLog.Logger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Shutdown)
	url := c.ClientURLs()
	nc := connect(t, url, "faults-cluster")
	s := settings(3)
	s.Consumers = streams.ConsumersByPriority // the scenario moves the leader of a priority consumer
	js := provision(t, nc, s)
	chk := checker.New()
	chk.ExplainUnfaulted("result write or ack lost in a leader change")
	fl, client := twoWorkers(t, url, nc, chk)
	gen := &loadGen{client: client, chk: chk}
	tasks, values := tasksFor(t, "cluster", n)

	ctx := ctxFor(t, 4*time.Minute)
	produced := make(chan error, 1)
	// About 500 tasks a second, so the producer runs across both faults.
	go func() { produced <- gen.enqueue(ctx, tasks, values, 50, 100*time.Millisecond) }()

	var events []faultEvent
	loseLeader := func(what string, leader func(context.Context) (string, error)) {
		t.Helper()
		before := leaderships(c)
		stopped, election := loseLeader(t, ctx, c, what, leader)
		events = append(events,
			faultEvent{at: stopped, what: what + " leader stopped; before, " + before},
			faultEvent{at: stopped.Add(election), what: "a new " + what + " leader seen"},
			faultEvent{at: time.Now(), what: "its node restarted"})
	}
	streamLeader := func(ctx context.Context) (string, error) {
		ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		s, err := js.Stream(ctx, names.TaskStream())
		if err != nil {
			return "", err
		}
		return clusterLeader(s.CachedInfo().Cluster)
	}
	consumerLeader := func(ctx context.Context) (string, error) {
		ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		cons, err := js.Consumer(ctx, names.TaskStream(), names.Consumer(spool.Normal))
		if err != nil {
			return "", err
		}
		return clusterLeader(cons.CachedInfo().Cluster)
	}

	// The fault schedule: a second into the run, lose the stream leader,
	// then a consumer leader (five rounds under soak).
	first := time.NewTimer(time.Second)
	select {
	case <-first.C:
	case <-ctx.Done():
		t.Fatal("deadline before the first fault")
	}
	rounds := scale(1)
	for range rounds {
		loseLeader("stream "+names.TaskStream(), streamLeader)
		loseLeader("consumer "+names.Consumer(spool.Normal), consumerLeader)
	}

	left := finishLoad(t, ctx, start, produced, js, fl, chk, gen)
	r := report(t, "node loss (3 nodes, R3)", fmt.Sprintf("%d stream + %d consumer leaders stopped", rounds, rounds), start, chk, left)
	if r.Tasks != n {
		t.Errorf("%d tasks recorded, want %d", r.Tasks, n)
	}
	if r.Completed != r.Tasks {
		t.Errorf("%d of %d tasks completed; dead: %s", r.Completed, r.Tasks, r.DeadSummary())
	}
	checkSequences(t, gen)
	if len(r.Lost) > 0 {
		explainLoss(t, c, js, gen, r.Lost, start, events, srvLog)
	}
}

// finishLoad waits for the producer (its error fails the test), for the
// queue to settle, stops the fleet and feeds the results, dead letters and
// execution logs to the checker; it returns the acknowledged tasks left in
// the stream.
func finishLoad(t testing.TB, ctx context.Context, start time.Time, produced <-chan error, js jetstream.JetStream, fl *fleet, chk *checker.Checker, gen *loadGen) []string {
	t.Helper()
	select {
	case err := <-produced:
		if err != nil {
			t.Fatalf("enqueueing: %v", err)
		}
		t.Logf("producer done at %s", time.Since(start).Round(time.Millisecond))
	case <-ctx.Done():
		t.Fatal("producer not done before the deadline")
	}
	left := settle(t, ctx, js, 2*time.Minute)
	fl.checkAlive()
	fl.stopAll(30 * time.Second)
	collect(t, js, chk)
	fl.readLogs()
	t.Logf("%d enqueues retried after an error", gen.Retries.Load())
	return left
}

// loseLeader stops the node that leads what leader reads, waits for
// another node to lead, and restarts the stopped one. It returns when the
// node was stopped and how long the election took.
func loseLeader(t testing.TB, ctx context.Context, c *embedded.Cluster, what string, leader func(context.Context) (string, error)) (stopped time.Time, election time.Duration) {
	t.Helper()
	return loseLeaderWith(t, ctx, c, what, leader, nil)
}

// loseLeaderWith is loseLeader calling also (when not nil) right after
// the node stopped, while the election runs.
func loseLeaderWith(t testing.TB, ctx context.Context, c *embedded.Cluster, what string, leader func(context.Context) (string, error), also func()) (stopped time.Time, election time.Duration) {
	t.Helper()
	var old string
	streamstest.WaitFor(t, 30*time.Second, func() error {
		var err error
		if old, err = leader(ctx); err != nil {
			return fmt.Errorf("%s leader: %w", what, err)
		}
		return nil
	})
	i := -1
	for j, s := range c.Servers() {
		if s.Name() == old {
			i = j
		}
	}
	if i < 0 {
		t.Fatalf("no node named %q", old)
	}
	c.Stop(i)
	stopped = time.Now()
	if also != nil {
		also()
	}
	streamstest.WaitFor(t, time.Minute, func() error {
		l, err := leader(ctx)
		if err == nil && (l == "" || l == old) {
			err = fmt.Errorf("leader %q", l)
		}
		if err != nil {
			return fmt.Errorf("a new %s leader: %w", what, err)
		}
		return nil
	})
	election = time.Since(stopped)
	t.Logf("%s leader %s stopped; new leader after %s", what, old, election.Round(time.Millisecond))
	if err := c.Restart(i); err != nil {
		t.Fatal(err)
	}
	return stopped, election
}

// clusterLeader returns the leader named in info.
func clusterLeader(info *jetstream.ClusterInfo) (string, error) {
	if info == nil {
		return "", errors.New("no cluster info")
	}
	if info.Leader == "" {
		return "", errors.New("no leader")
	}
	return info.Leader, nil
}
