package faults_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/spoolq/spool/producer"
	spool "github.com/spoolq/spool/shared"
	"github.com/spoolq/spool/shared/limits"
	"github.com/spoolq/spool/streams"
	"github.com/spoolq/spool/tests/checker"
)

// TestFlowControlUnderCrash runs 20,000 tasks through three
// spool-faultworker processes of 50 slots each, one of them killed with
// SIGKILL every half second and replaced, with three kinds of work: a type
// limited to 40 running at once and 2 per key (100 keys), a type limited to
// 50 starts a second, and an unlimited type. From the start and end of
// every run it checks that no moment ever had more runs of the limited
// type, or of one key, than the limit (a run cut by a kill counts until
// the kill), that no second held more starts of the paced type than its
// rate (and reports in the fault table the fraction of the rate the paced
// backlog reached while there was backlog, checker.RateUnderBacklog), that no task of the ordered type (25 keys, "hold")
// started before every task enqueued before it under its key had
// completed, and, as every fault scenario does, that nothing was lost.
func TestFlowControlUnderCrash(t *testing.T) {
	const (
		workers    = 3
		slots      = 50
		killEvery  = 500 * time.Millisecond
		limit      = 40
		keyLimit   = 2
		keys       = 100
		rate       = 50
		ratePeriod = time.Second
		orderKeys  = 25
	)
	// The same counts under soak, where the tasks run on an R3 cluster
	// with fsync on every node (startQueue) at a tenth of the pace; the
	// kills keep their rate, so the soak's faults grow with its time.
	nLimited, nPaced, nFree, nOrdered := 4_000, 500, 15_500, 1_000
	start := time.Now()
	q := startQueue(t, "flow")
	nc := connect(t, q.url, "faults-flow")
	// Workers pull by type, as a new deployment's do: a worker pulls the
	// paced type only while its rate line has room.
	s := q.settings
	s.Consumers = streams.ConsumersByType
	js := provision(t, nc, s)
	ctx := ctxFor(t, time.Duration(scale(4))*time.Minute)
	store, err := limits.Open(ctx, js, names)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range []limits.Rule{
		{Type: "fault.limited", Concurrency: limit, KeyConcurrency: keyLimit},
		{Type: "fault.paced", Rate: &limits.Rate{Limit: rate, Period: limits.Duration(ratePeriod)}},
		{Type: "fault.ordered", Ordered: limits.OrderHold},
	} {
		if err := store.Put(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	chk := checker.New()
	spanLog := filepath.Join(t.TempDir(), "spans.log")
	fl := newFleet(t, q.url, chk, fmt.Sprintf("SPOOL_CONCURRENCY=%d", slots), "SPOOL_FAULT_SPAN_LOG="+spanLog)
	for range workers {
		fl.start()
	}
	client, err := producer.New(nc, producer.WithTimeout(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(client.Close)
	gen := &loadGen{client: client, chk: chk}

	// The paced tasks first, all of them queued within the first second
	// (at 50/s they need ten), then the other two kinds interleaved. The
	// paced type has a priority of its own: a task handed back waits
	// behind the tasks of its priority queued meanwhile, so behind a deep
	// backlog of other work it would come back late for its turn.
	var tasks []producer.Task
	var values []string
	add := func(typ, id, key string, p spool.Priority, sleep int) {
		tk, v := newTask(t, id, p, faultTask{SleepMS: sleep})
		tk.Type, tk.Key = typ, key
		tasks, values = append(tasks, tk), append(values, v)
	}
	for i := range nPaced {
		add("fault.paced", fmt.Sprintf("pace-%06d", i), "", spool.High, 0)
	}
	for i := range max(nLimited, nFree, nOrdered) {
		if i < nOrdered {
			// The id carries the enqueue index; tasks are enqueued in
			// index order.
			add("fault.ordered", fmt.Sprintf("ord-%06d", i), fmt.Sprintf("acct-%02d", i%orderKeys), spool.Normal, 2)
		}
		if i < nLimited {
			add("fault.limited", fmt.Sprintf("lim-%06d", i), fmt.Sprintf("customer-%03d", i%keys), spool.Normal, 2)
		}
		if i < nFree {
			add("fault.task", fmt.Sprintf("free-%06d", i), "", spool.Normal, 0)
		}
	}
	produced := make(chan error, 1)
	go func() { produced <- gen.enqueue(ctx, tasks, values, 500, 0) }()

	// On the soak's R3 cluster with fsync a task takes about twenty times
	// as long; at the bounded run's kill rate a worker lived little longer
	// than it took to start (1,363 kills in 13 minutes), and a task ran
	// out of its 10 deliveries. Kill four times less often there.
	every := killEvery
	if q.label != "" {
		every *= 4
	}
	killedAt := fl.killUntilDone(ctx, produced, every, func(ctx context.Context) error { return idleFlow(ctx, js) })
	left := settle(t, ctx, js, time.Minute)
	fl.stopAll(30 * time.Second)

	collect(t, js, chk)
	lines, torn := fl.readLogs()
	t.Logf("%d execution lines, %d torn by SIGKILL, %d workers started", lines, torn, workers+fl.kills)
	spans, tornSpans := readSpans(t, spanLog)
	unfinished := 0
	var (
		paced     []time.Time
		pacedRuns []checker.Span
	)
	for _, s := range spans {
		if s.End.IsZero() {
			unfinished++
		}
		if s.Type == "fault.paced" {
			paced = append(paced, s.Start)
			pacedRuns = append(pacedRuns, s)
		}
	}
	t.Logf("%d runs in the span log (%d cut by a kill, %d torn lines)", len(spans), unfinished, tornSpans)
	byType, err := checker.MaxConcurrent(spans, killedAt, ofType("fault.limited"))
	if err != nil {
		t.Fatal(err)
	}
	byKey, err := checker.MaxConcurrent(spans, killedAt, func(s checker.Span) string {
		if s.Type == "fault.limited" {
			return s.Key
		}
		return ""
	})
	if err != nil {
		t.Fatal(err)
	}
	o := byType["fault.limited"]
	t.Logf("fault.limited: most running at once %d (limit %d) at %s", o.Max, limit, o.At.Format(time.RFC3339Nano))
	if o.Max > limit {
		t.Errorf("fault.limited ran %d at once at %s, limit %d", o.Max, o.At.Format(time.RFC3339Nano), limit)
	}
	worstKey := checker.Overlap{}
	for _, ko := range byKey {
		if ko.Max > worstKey.Max {
			worstKey = ko
		}
		if ko.Max > keyLimit {
			t.Errorf("key %s ran %d at once at %s, limit %d", ko.Group, ko.Max, ko.At.Format(time.RFC3339Nano), keyLimit)
		}
	}
	t.Logf("fault.limited: most running at once for one key %d (limit %d, %d keys)", worstKey.Max, keyLimit, len(byKey))

	// Per-key order: no run of an ordered task started before every task
	// of its key enqueued before it had completed (a run cut by a kill
	// did not complete; the task's key waits for its redelivery).
	orderedKey := func(s checker.Span) string {
		if s.Type == "fault.ordered" {
			return s.Key
		}
		return ""
	}
	breaches := checker.KeyOrder(spans, orderedKey, func(s checker.Span) int {
		n, _ := strconv.Atoi(strings.TrimPrefix(s.ID, "ord-"))
		return n
	})
	for i, b := range breaches {
		if i == 5 {
			t.Errorf("... %d order breaches in all", len(breaches))
			break
		}
		t.Errorf("key %s: %s (attempt %d) started at %s before %s completed (first completed run ended %s)", b.Key, b.Run.ID, b.Run.Attempt,
			b.Run.Start.Format(time.RFC3339Nano), b.Earlier, b.First.End.Format(time.RFC3339Nano))
	}
	byOrderedKey, err := checker.MaxConcurrent(spans, killedAt, orderedKey)
	if err != nil {
		t.Fatal(err)
	}
	ordRuns, ordMost := 0, 0
	for _, s := range spans {
		if s.Type == "fault.ordered" {
			ordRuns++
		}
	}
	for _, ko := range byOrderedKey {
		ordMost = max(ordMost, ko.Max)
	}
	t.Logf("fault.ordered: %d runs of %d tasks over %d keys, %d order breaches, most runs of one key at once %d (a run again of a completed task counts)",
		ordRuns, nOrdered, len(byOrderedKey), len(breaches), ordMost)

	// The rate: no window of a period holds more starts than the limit.
	// The limiter grants at most the limit in any half-open window [t,
	// t+period) (limits.Rate.GCRA); the checker counts the windows [s,
	// s+period) opening at each handler start, taken a few milliseconds
	// after the grant, so one more than the limit is measurement jitter,
	// not a breach.
	most, _ := checker.MaxInWindow(paced, ratePeriod)
	if most > rate+1 {
		t.Errorf("fault.paced: %d starts within %s, limit %d", most, ratePeriod, rate)
	}
	// And the rate reached while there was backlog: from the first start
	// until fewer than a period's allowance of paced tasks were waiting (a
	// task held by a killed worker until its redelivery still waits).
	reached := checker.RateUnderBacklog(pacedRuns, nPaced, rate, ratePeriod)
	t.Logf("fault.paced: %d starts, most in any %s %d (limit %d); %d starts in the %.1fs of backlog: %.0f%% of the rate; per %s: %v",
		len(paced), ratePeriod, most, rate, reached.Starts, reached.To.Sub(reached.From).Seconds(), 100*reached.Fraction, ratePeriod, reached.Windows)
	// The fraction is reported in the fault table, not asserted: on a
	// shared 2-core machine it follows the load (a worker that wakes late
	// for a start loses it, a worker starved of CPU takes starts late, and
	// the tasks a killed worker held wait for their redelivery): it
	// reached 89-95% in quiet runs, 70-86% with the consumer module's tests
	// running beside it, and 20-69% at load averages of 20 to 50, so no
	// floor near 90% would hold there. spool-bench measures it without
	// faults. A limiter that stalls fails the suite's wait for every task.
	r := report(t, "flow control (SIGKILL)"+q.label, fmt.Sprintf("%d SIGKILL; rate reached %.0f%%", fl.kills, 100*reached.Fraction), start, chk, left)
	if r.Tasks != len(tasks) {
		t.Errorf("%d tasks recorded, want %d", r.Tasks, len(tasks))
	}
	if r.Completed != r.Tasks {
		t.Errorf("%d of %d tasks completed; dead: %s", r.Completed, r.Tasks, r.DeadSummary())
	}
	if fl.kills < 5 {
		t.Errorf("only %d kills during the run; the scenario proves little", fl.kills)
	}
}

// idleFlow is idle, and also waits for the schedules to fire (the tasks
// handed back for flow control wait as schedules) and for the held
// subjects to empty (the tasks of ordered keys wait there).
func idleFlow(ctx context.Context, js jetstream.JetStream) error {
	tctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	s, err := js.Stream(tctx, names.TaskStream())
	if err != nil {
		return err
	}
	si, err := s.Info(tctx, jetstream.WithSubjectFilter(names.SchedFilter()))
	if err != nil {
		return err
	}
	if n := len(si.State.Subjects); n > 0 {
		return fmt.Errorf("%d tasks handed back for flow control still to come back", n)
	}
	hi, err := s.Info(tctx, jetstream.WithSubjectFilter(names.HeldFilter()))
	if err != nil {
		return err
	}
	if n := len(hi.State.Subjects); n > 0 {
		return fmt.Errorf("tasks of %d ordered keys still waiting for their turn", n)
	}
	return idle(ctx, js)
}

// readSpans reads a span log: the runs, and the lines a kill tore.
func readSpans(t testing.TB, path string) ([]checker.Span, int) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	spans, torn, err := checker.ReadSpanLog(f)
	if err != nil {
		t.Fatal(err)
	}
	return spans, torn
}

// ofType groups the runs of typ together for checker.MaxConcurrent and
// leaves the others out.
func ofType(typ string) func(checker.Span) string {
	return func(s checker.Span) string {
		if s.Type == typ {
			return s.Type
		}
		return ""
	}
}
