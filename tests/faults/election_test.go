package faults_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
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

// electionCluster starts a 3-node cluster with everything at R3 and
// provisions it. The bounded run skips fsync (these tests are about
// elections, not power loss); the soak keeps sync_interval: always, the
// durable deployment the guarantees are stated for.
func electionCluster(t *testing.T) (*embedded.Cluster, string, *nats.Conn, jetstream.JetStream) {
	t.Helper()
	c, err := embedded.StartCluster(3, embedded.Options{Name: "elect", StoreDir: t.TempDir(), SyncAlways: soak()})
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
// request the election swallowed takes the whole minute. A task whose
// delivery was lost with the stopped node (a worker connected through it)
// comes back only after the AckWait (30s) and then runs its 3 s, so a Wait
// that answers then has not hung: the bound leaves room for it.
const waitBound = 45 * time.Second

// waitRounds is how many times a leader is killed under ten Waits: the
// meta leader, through which every API request goes, five times.
func waitRounds(f electionFault) int {
	if f.name == "meta" {
		return max(5, scale(5)/2)
	}
	return max(3, scale(3)/2)
}

// TestElectionWaits opens ten Waits on tasks that take 3 s while a leader
// is killed, for each leader, several times: every Wait answers with the
// completed result well before its own timeout. Every other Wait goes
// through the broker's ?wait= long poll instead of Client.Wait.
func TestElectionWaits(t *testing.T) {
	start := time.Now()
	c, url, nc, js := electionCluster(t)
	chk := checker.New()
	// The client on a connection of its own, which may be the killed
	// node's: it reconnects. The broker has another.
	fl, client := twoWorkers(t, url, connect(t, url, "faults-election-waits"), chk)
	broker := newElectionBroker(t, url, nc)
	ctx := ctxFor(t, 10*time.Minute)
	kills := 0
	for _, f := range electionFaults {
		var slowest time.Duration
		rounds := waitRounds(f)
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
					var r spool.Result
					var err error
					if i%2 == 0 {
						r, err = client.Wait(wctx, id)
					} else {
						r, err = broker.wait(wctx, id)
					}
					took[i] = time.Since(t0)
					if err == nil && r.State != spool.StateCompleted {
						err = fmt.Errorf("state %s (%s)", r.State, r.Error)
					}
					errs[i] = err
				})
			}
			loseLeader(t, ctx, c, f.name, func(ctx context.Context) (string, error) { return f.leader(ctx, c, js) })
			kills++
			wg.Wait()
			for i, err := range errs {
				via := "Wait"
				if i%2 == 1 {
					via = "?wait="
				}
				if err != nil {
					t.Errorf("%s, round %d: %s %s: %v", f.name, round, via, ids[i], err)
				}
				if took[i] > waitBound {
					t.Errorf("%s, round %d: %s %s took %s: hung through the election", f.name, round, via, ids[i], took[i])
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
	r := report(t, "elections, 10 Waits each"+soakSync(), fmt.Sprintf("%d leader kills", kills), start, chk, nil)
	if r.DuplicateExecutions > 0 {
		t.Errorf("%d executions ran again, with no worker process lost: %v\n%s", r.DuplicateExecutions, r.DupCauses, dupReport(r, fl))
	}
}

// TestElectionLoad runs short tasks on two worker processes while the
// meta, task stream and results bucket leaders are killed in turn, several
// times each: nothing is lost and, with no worker process lost, nothing
// runs twice. It logs how long completions stopped after each kill.
func TestElectionLoad(t *testing.T) {
	l := startElectionLoad(t, "elect")
	n, start, c, js, fl, chk, gen, ctx, produced, completions := l.n, l.start, l.c, l.js, l.fl, l.chk, l.gen, l.ctx, l.produced, l.completions
	rounds := scale(2)
	type kill struct {
		fault string
		at    time.Time
	}
	var kills []kill
	// Each kill under load: 1,000 more completions first, but no later
	// than its share of the run (under soak's rounds the kills and the
	// elections after them outpace the steps of 1,000: completions are
	// never waited for past the last task).
	total := rounds * len(electionFaults)
	for round := range rounds {
		for i, f := range electionFaults {
			k := round*len(electionFaults) + i
			completions.await(t, min(completions.count()+1_000, (k+1)*n/(total+1)))
			at, _ := loseLeader(t, ctx, c, f.name, func(ctx context.Context) (string, error) { return f.leader(ctx, c, js) })
			kills = append(kills, kill{f.name, at})
		}
	}
	left := finishLoad(t, ctx, start, produced, js, fl, chk, gen)
	done := completions.times()
	t.Logf("%d completions seen on %s", len(done), names.ResultSubject("*"))
	for _, k := range kills {
		t.Logf("%s leader killed: completions stopped for %s", k.fault, longestGap(done, k.at, 15*time.Second).Round(time.Millisecond))
	}
	r := report(t, "elections under load (3 nodes, R3"+soakSync()+")", fmt.Sprintf("%d kills of each of 3 leaders", rounds), start, chk, left)
	if r.Completed != r.Tasks || r.Tasks != n {
		t.Errorf("%d of %d tasks completed (%d recorded); dead: %s", r.Completed, n, r.Tasks, r.DeadSummary())
	}
	if r.DuplicateExecutions > 0 {
		t.Errorf("%d executions ran again, with no worker process lost: %v\n%s", r.DuplicateExecutions, r.DupCauses, dupReport(r, fl))
	}
}

// electionLoad is a run of short tasks on two worker processes on an
// election cluster (see startElectionLoad).
type electionLoad struct {
	n           int
	start       time.Time
	c           *embedded.Cluster
	nc          *nats.Conn
	js          jetstream.JetStream
	fl          *fleet
	chk         *checker.Checker
	gen         *loadGen
	ctx         context.Context
	produced    chan error // the producer's outcome
	completions *completionLog
}

// startElectionLoad starts an election cluster, two worker processes of
// 16 slots and a producer of 20,000 tasks (ids <prefix>-<i>) at about
// 1,000 a second, so that it runs across the faults; under soak five
// times the time (5 minutes) for the fsyncs and the rounds.
func startElectionLoad(t *testing.T, prefix string) *electionLoad {
	t.Helper()
	// The same count under soak, where the cluster fsyncs every write
	// (electionCluster); the soak multiplies the elections instead.
	l := &electionLoad{n: 20_000, start: time.Now(), chk: checker.New(), produced: make(chan error, 1)}
	var url string
	l.c, url, l.nc, l.js = electionCluster(t)
	var client *producer.Client
	l.fl, client = twoWorkers(t, url, l.nc, l.chk)
	l.gen = &loadGen{client: client, chk: l.chk}
	tasks, values := tasksFor(t, prefix, l.n)
	// Completion times: how long throughput stops after a kill.
	l.completions = watchCompletions(t, l.nc)
	l.ctx = ctxFor(t, time.Duration(scale(5))*time.Minute)
	go func() { l.produced <- l.gen.enqueue(l.ctx, tasks, values, 50, 50*time.Millisecond) }()
	return l
}

// workerSlots is the slots of each fault worker process (twoWorkers), and
// killBound the executions a SIGKILLed worker process can leave to run
// again: its running attempts (its slots) and its completions whose
// result write is not yet acknowledged (the consumer's pipeline depth,
// max(256, 4x the slots); an attempt finding the pipeline full keeps its
// slot, so the two add up). An attempt whose result is stored is not run
// again: its redelivery finds the result and is acked.
const (
	workerSlots = 16
	killBound   = workerSlots + max(256, 4*workerSlots)
)

// TestElectionWorkerKill SIGKILLs one worker process together with the
// node leading the results bucket (and, moved there first, the task
// stream) while short tasks run on two worker processes, and restarts
// both, several times: nothing is lost, every task completes, and the
// tasks that ran again are at most killBound per kill, all of them the
// killed process's.
func TestElectionWorkerKill(t *testing.T) {
	l := startElectionLoad(t, "wkill")
	n, start, c, nc, js, fl, chk, gen, ctx, produced, completions := l.n, l.start, l.c, l.nc, l.js, l.fl, l.chk, l.gen, l.ctx, l.produced, l.completions
	rounds := scale(2)
	results := electionFaults[2]
	var kills []time.Time
	for round := range rounds {
		// Kills spread over the run: the first at about 1/(rounds+1) of it.
		completions.await(t, (round+1)*n/(rounds+2))
		var target string
		streamstest.WaitFor(t, 30*time.Second, func() (err error) {
			target, err = results.leader(ctx, c, js)
			if err != nil {
				return err
			}
			return moveStreamLeader(ctx, nc, js, names.TaskStream(), target)
		})
		victim := fl.running()[0]
		at, _ := loseLeaderWith(t, ctx, c, "results bucket and task stream", func(ctx context.Context) (string, error) { return results.leader(ctx, c, js) }, func() {
			// While the election runs, with the victim's result writes
			// waiting for a new leader.
			fl.kill(victim)
			fl.start()
		})
		kills = append(kills, at)
	}
	left := finishLoad(t, ctx, start, produced, js, fl, chk, gen)
	done := completions.times()
	for _, at := range kills {
		t.Logf("worker and node killed: completions stopped for %s", longestGap(done, at, 15*time.Second).Round(time.Millisecond))
	}
	r := report(t, "worker SIGKILL with the results and task stream leader (3 nodes, R3"+soakSync()+")", fmt.Sprintf("%d kills of a worker and a node", rounds), start, chk, left)
	if r.Completed != r.Tasks || r.Tasks != n {
		t.Errorf("%d of %d tasks completed (%d recorded); dead: %s", r.Completed, n, r.Tasks, r.DeadSummary())
	}
	for cause, k := range r.DupCauses {
		if cause != "SIGKILL" {
			t.Errorf("%d executions ran again for a cause other than the kills: %s", k, cause)
		}
	}
	if k, bound := r.DupCauses["SIGKILL"], rounds*killBound; k > bound {
		t.Errorf("%d executions ran again after %d kills of a worker process with %d slots: more than %d (%d per kill)", k, rounds, workerSlots, bound, killBound)
	}
	t.Logf("%d executions ran again after %d kills (bound %d per kill)", r.DupCauses["SIGKILL"], rounds, killBound)
}

// moveStreamLeader asks stream's leader to step down in favour of the
// node named to, and returns nil once to leads it.
func moveStreamLeader(ctx context.Context, nc *nats.Conn, js jetstream.JetStream, stream, to string) error {
	l, err := streamLeaderOf(ctx, js, stream)
	if err != nil || l == to {
		return err
	}
	req := fmt.Sprintf(`{"placement":{"preferred":%q}}`, to)
	rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	m, err := nc.RequestWithContext(rctx, "$JS.API.STREAM.LEADER.STEPDOWN."+stream, []byte(req))
	if err != nil {
		return fmt.Errorf("stepping down %s's leader %s: %w", stream, l, err)
	}
	return fmt.Errorf("%s led by %s, moving to %s: %s", stream, l, to, m.Data)
}

// completionLog records when completed results appear on the results
// bucket's subject (core NATS: it costs the cluster no consumer).
type completionLog struct {
	mu sync.Mutex
	at []time.Time
}

// watchCompletions subscribes on nc until the test ends.
func watchCompletions(t testing.TB, nc *nats.Conn) *completionLog {
	t.Helper()
	l := &completionLog{}
	sub, err := nc.Subscribe(names.ResultSubject("*"), func(m *nats.Msg) {
		if bytes.Contains(m.Data, []byte(`"state":"completed"`)) {
			l.mu.Lock()
			l.at = append(l.at, time.Now())
			l.mu.Unlock()
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := sub.SetPendingLimits(-1, -1); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	return l
}

// times returns the completion times so far, in order of arrival.
func (l *completionLog) times() []time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.at)
}

// count is the number of completions so far.
func (l *completionLog) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.at)
}

// await waits (a minute at most) until n completions were seen.
func (l *completionLog) await(t testing.TB, n int) {
	t.Helper()
	streamstest.WaitFor(t, time.Minute, func() error {
		if got := l.count(); got < n {
			return fmt.Errorf("%d completions, waiting for %d", got, n)
		}
		return nil
	})
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

// dupReport says which tasks ran more than once (the first few: each run's
// worker and delivery), what the workers logged about them, and the end of
// every worker's log.
func dupReport(r checker.Report, fl *fleet) string {
	ids := make([]string, 0, len(r.DupDetails))
	for _, d := range r.DupDetails {
		id, _, _ := strings.Cut(d, ":")
		ids = append(ids, id)
	}
	return fmt.Sprintf("runs:\n%s\nworker lines naming them:\n%s\nends of the worker logs:\n%s",
		strings.Join(r.DupDetails, "\n"), fl.mentions(ids), fl.tails())
}
