package faults_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/spoolq/spool/producer"
	spool "github.com/spoolq/spool/shared"
	"github.com/spoolq/spool/streams/embedded"
	"github.com/spoolq/spool/streams/streamstest"
	"github.com/spoolq/spool/tests/checker"
)

// The leader elections of the "ride out elections" tests: the JetStream
// meta leader (every API request goes through it), the task stream's
// leader and the results bucket's.
type electionFault struct {
	name   string
	leader func(ctx context.Context, c *embedded.Cluster, js jetstream.JetStream) (string, error)
}

var electionFaults = []electionFault{
	{"meta", func(_ context.Context, c *embedded.Cluster, _ jetstream.JetStream) (string, error) {
		for _, s := range c.Servers() {
			if s.Running() && s.JetStreamIsLeader() {
				return s.Name(), nil
			}
		}
		return "", errors.New("no meta leader")
	}},
	{"task stream", func(ctx context.Context, _ *embedded.Cluster, js jetstream.JetStream) (string, error) {
		return streamLeaderOf(ctx, js, names.TaskStream())
	}},
	{"results bucket", func(ctx context.Context, _ *embedded.Cluster, js jetstream.JetStream) (string, error) {
		return streamLeaderOf(ctx, js, "KV_"+names.ResultsBucket())
	}},
}

func streamLeaderOf(ctx context.Context, js jetstream.JetStream, stream string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	s, err := js.Stream(ctx, stream)
	if err != nil {
		return "", err
	}
	return clusterLeader(s.CachedInfo().Cluster)
}

// electionCluster starts a 3-node cluster with everything at R3 (no
// fsync: these tests are about elections, not power loss) and provisions
// it.
func electionCluster(t *testing.T) (*embedded.Cluster, string, *nats.Conn, jetstream.JetStream) {
	t.Helper()
	c, err := embedded.StartCluster(3, embedded.Options{Name: "elect", StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Shutdown)
	url := c.ClientURLs()
	nc := connect(t, url, "faults-election")
	// The default AckWait (30s), as a deployment has it: no worker process
	// is lost here, so it costs no recovery time, and the retry budget of
	// a settling write (3/4 of it) outlasts an election. The 2s of the
	// other scenarios is shorter than an election.
	s := settings(3)
	s.AckWait = 30 * time.Second
	return c, url, nc, provision(t, nc, s)
}

// waitBound is how long a Wait on a 3 s task may take through an
// election: well before the Wait's own minute. A Wait that hangs on a
// request the election swallowed takes the whole minute.
const waitBound = 30 * time.Second

// TestElectionWaits opens ten Waits on tasks that take 3 s while a leader
// is killed, for each leader, several times: every Wait answers with the
// completed result well before its own timeout.
func TestElectionWaits(t *testing.T) {
	start := time.Now()
	c, url, _, js := electionCluster(t)
	chk := checker.New()
	// The client on a connection of its own, which may be the killed
	// node's: it reconnects.
	fl, client := twoWorkers(t, url, connect(t, url, "faults-election-waits"), chk)
	ctx := ctxFor(t, 5*time.Minute)
	rounds := max(3, scale(3)/2)
	for _, f := range electionFaults {
		var slowest time.Duration
		for round := range rounds {
			ids := make([]string, 10)
			for i := range ids {
				task, v := newTask(t, fmt.Sprintf("wait-%s-%d-%d", f.name[:4], round, i), spool.High, faultTask{SleepMS: 3000})
				if _, err := client.Enqueue(ctx, task); err != nil {
					t.Fatalf("enqueue before the %s fault: %v", f.name, err)
				}
				ids[i] = task.ID
				chk.Enqueued(task.ID, v)
			}
			var wg sync.WaitGroup
			took := make([]time.Duration, len(ids))
			errs := make([]error, len(ids))
			for i, id := range ids {
				wg.Go(func() {
					wctx, cancel := context.WithTimeout(ctx, time.Minute)
					defer cancel()
					t0 := time.Now()
					r, err := client.Wait(wctx, id)
					took[i] = time.Since(t0)
					if err == nil && r.State != spool.StateCompleted {
						err = fmt.Errorf("state %s (%s)", r.State, r.Error)
					}
					errs[i] = err
				})
			}
			loseLeader(t, ctx, c, f.name, func(ctx context.Context) (string, error) { return f.leader(ctx, c, js) })
			wg.Wait()
			for i, err := range errs {
				if err != nil {
					t.Errorf("%s, round %d: Wait %s: %v", f.name, round, ids[i], err)
				}
				if took[i] > waitBound {
					t.Errorf("%s, round %d: Wait %s took %s: hung through the election", f.name, round, ids[i], took[i])
				}
			}
			slowest = max(slowest, slices.Max(took))
		}
		t.Logf("%s leader killed %d times while 10 Waits opened: slowest Wait %s (tasks take 3s)", f.name, rounds, slowest.Round(time.Millisecond))
	}
	fl.checkAlive()
	fl.stopAll(30 * time.Second)
	collect(t, js, chk)
	fl.readLogs()
	r := report(t, "elections, 10 Waits each", fmt.Sprintf("%d kills of each of 3 leaders", rounds), start, chk, nil)
	if r.DuplicateExecutions > 0 {
		t.Errorf("%d executions ran again, with no worker process lost: %v", r.DuplicateExecutions, r.DupCauses)
	}
}

// TestElectionLoad runs short tasks on two worker processes while the
// meta, task stream and results bucket leaders are killed in turn, several
// times each: nothing is lost and, with no worker process lost, nothing
// runs twice. It logs how long completions stopped after each kill.
func TestElectionLoad(t *testing.T) {
	n := scale(20_000)
	start := time.Now()
	c, url, nc, js := electionCluster(t)
	chk := checker.New()
	fl, client := twoWorkers(t, url, nc, chk)
	gen := &loadGen{client: client, chk: chk}
	tasks, values := tasksFor(t, "elect", n)

	// Completion times, from the results bucket's subject: how long
	// throughput stops after a kill.
	var mu sync.Mutex
	var completions []time.Time
	sub, err := nc.Subscribe(names.ResultSubject("*"), func(m *nats.Msg) {
		if bytes.Contains(m.Data, []byte(`"state":"completed"`)) {
			mu.Lock()
			completions = append(completions, time.Now())
			mu.Unlock()
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := sub.SetPendingLimits(-1, -1); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })

	// Five times the tasks and kills under soak: the time in proportion.
	ctx := ctxFor(t, time.Duration(scale(5))*time.Minute)
	produced := make(chan error, 1)
	// About 1,000 tasks a second, so the producer runs across the faults.
	go func() { produced <- gen.enqueue(ctx, tasks, values, 50, 50*time.Millisecond) }()
	rounds := scale(2)
	type kill struct {
		fault string
		at    time.Time
	}
	var kills []kill
	seen := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(completions)
	}
	for range rounds {
		for _, f := range electionFaults {
			// Each kill under load: 1,000 more completions first.
			want := seen() + 1_000
			streamstest.WaitFor(t, time.Minute, func() error {
				if n := seen(); n < want {
					return fmt.Errorf("%d completions, waiting for %d", n, want)
				}
				return nil
			})
			at, _ := loseLeader(t, ctx, c, f.name, func(ctx context.Context) (string, error) { return f.leader(ctx, c, js) })
			kills = append(kills, kill{f.name, at})
		}
	}
	left := finishLoad(t, ctx, start, produced, js, fl, chk, gen)
	mu.Lock()
	done := slices.Clone(completions)
	mu.Unlock()
	t.Logf("%d completions seen on %s", len(done), names.ResultSubject("*"))
	for _, k := range kills {
		t.Logf("%s leader killed: completions stopped for %s", k.fault, longestGap(done, k.at, 15*time.Second).Round(time.Millisecond))
	}
	r := report(t, "elections under load (3 nodes, R3)", fmt.Sprintf("%d kills of each of 3 leaders", rounds), start, chk, left)
	if r.Completed != r.Tasks || r.Tasks != n {
		t.Errorf("%d of %d tasks completed (%d recorded); dead: %s", r.Completed, n, r.Tasks, r.DeadSummary())
	}
	if r.DuplicateExecutions > 0 {
		t.Errorf("%d executions ran again, with no worker process lost: %v", r.DuplicateExecutions, r.DupCauses)
	}
}

// longestGap is the longest time without a completion in the window
// after from, the window ending early with the last completion of the run
// (times is in order of arrival).
func longestGap(times []time.Time, from time.Time, window time.Duration) time.Duration {
	end := from.Add(window)
	if n := len(times); n > 0 && times[n-1].Before(end) {
		end = times[n-1]
	}
	last, gap := from, time.Duration(0)
	for _, at := range times {
		if at.Before(from) {
			continue
		}
		if at.After(end) {
			break
		}
		gap = max(gap, at.Sub(last))
		last = at
	}
	return max(gap, end.Sub(last))
}

// TestWorkerStartsDuringElection starts a worker process right after the
// meta leader was killed, while the election runs: it binds once the
// cluster answers and processes, and never exits.
func TestWorkerStartsDuringElection(t *testing.T) {
	c, url, nc, js := electionCluster(t)
	chk := checker.New()
	fl := newFleet(t, url, chk, "SPOOL_CONCURRENCY=4")
	ctx := ctxFor(t, 2*time.Minute)
	meta := electionFaults[0]
	old, err := meta.leader(ctx, c, js)
	if err != nil {
		t.Fatal(err)
	}
	for i, s := range c.Servers() {
		if s.Name() == old {
			c.Stop(i)
			t.Cleanup(func() { _ = c.Restart(i) })
		}
	}
	fl.start() // during the election
	client, err := producer.New(nc, producer.WithTimeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(client.Close)
	task, v := newTask(t, "start-during-election", spool.Normal, faultTask{})
	if _, err := client.Enqueue(ctx, task); err != nil {
		t.Fatal(err)
	}
	chk.Enqueued(task.ID, v)
	r, err := client.Wait(ctx, task.ID)
	if err != nil || r.State != spool.StateCompleted {
		t.Fatalf("task after a start during an election: %+v, %v", r, err)
	}
	fl.checkAlive()
	fl.stopAll(30 * time.Second)
}
