package checker_test

import (
	"bytes"
	"strings"
	"testing"

	"go.uber.org/goleak"

	spool "github.com/spoolq/spool/shared"
	"github.com/spoolq/spool/tests/checker"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func completed(id, value string) spool.Result {
	return spool.Result{ID: id, State: spool.StateCompleted, Attempts: 1, Result: []byte(`"` + value + `"`)}
}

// history builds a checker from a compact description.
type history struct {
	enqueued  map[string]string
	attempted map[string]string
	execs     map[string][]checker.Execution
	results   []spool.Result
	dead      map[string]spool.Reason
	faulted   map[string]string
	unfault   string
	expect    map[string]int
}

func (h history) checker() *checker.Checker {
	c := checker.New()
	for id, v := range h.enqueued {
		c.Enqueued(id, v)
	}
	for id, v := range h.attempted {
		c.Attempted(id, v)
	}
	if h.unfault != "" {
		c.ExplainUnfaulted(h.unfault)
		for id, v := range h.attempted { // acknowledged on a retry
			c.Enqueued(id, v)
		}
	}
	for id, es := range h.execs {
		for _, e := range es {
			c.Executed(id, e)
		}
	}
	for _, r := range h.results {
		c.Result(r)
	}
	for id, reason := range h.dead {
		c.DeadLetter(id, checker.DeadLetter{Reason: reason, Attempts: 1})
	}
	for id, n := range h.expect {
		c.ExpectExecutions(id, n)
	}
	for w, f := range h.faulted {
		c.Faulted(w, f)
	}
	return c
}

func exec(v, worker string) checker.Execution {
	return checker.Execution{Value: v, Worker: worker, Attempt: 1}
}

func TestCheck(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		h       history
		wantErr string // substring of Report.Err; empty: no error
		check   func(t *testing.T, r checker.Report)
	}{
		{
			name: "clean",
			h: history{
				enqueued: map[string]string{"a": "va", "b": "vb"},
				execs:    map[string][]checker.Execution{"a": {exec("va", "w1")}, "b": {exec("vb", "w2")}},
				results:  []spool.Result{completed("a", "va"), completed("b", "vb")},
			},
			check: func(t *testing.T, r checker.Report) {
				if r.Tasks != 2 || r.Completed != 2 || r.Executions != 2 || r.DuplicateExecutions != 0 {
					t.Errorf("report %+v", r)
				}
			},
		},
		{
			name: "lost",
			h: history{
				enqueued: map[string]string{"a": "va", "b": "vb"},
				execs:    map[string][]checker.Execution{"a": {exec("va", "w1")}},
				results:  []spool.Result{completed("a", "va")},
			},
			wantErr: "1 lost: b",
		},
		{
			name: "stuck",
			h: history{
				enqueued: map[string]string{"a": "va"},
				results:  []spool.Result{{ID: "a", State: spool.StateProcessing, Attempts: 2, Worker: "w9"}},
			},
			wantErr: "1 stuck: a: processing after 2 attempts (worker w9)",
		},
		{
			name: "duplicate explained by a fault",
			h: history{
				enqueued: map[string]string{"a": "va", "b": "vb"},
				execs: map[string][]checker.Execution{
					"a": {exec("va", "w1"), exec("va", "w2")},
					"b": {exec("vb", "w2"), exec("vb", "w2"), exec("vb", "w3")},
				},
				results: []spool.Result{completed("a", "va"), completed("b", "vb")},
				faulted: map[string]string{"w1": "SIGKILL"},
			},
			check: func(t *testing.T, r checker.Report) {
				if r.Duplicated != 2 || r.DuplicateExecutions != 3 {
					t.Errorf("duplicated %d tasks, %d executions; want 2, 3", r.Duplicated, r.DuplicateExecutions)
				}
				if r.DupCauses["SIGKILL"] != 1 || r.DupCauses["redelivered without a worker fault (ack lost or late)"] != 2 {
					t.Errorf("causes %v", r.DupCauses)
				}
				if got, want := r.DupSummary(), "3 (SIGKILL: 1, redelivered without a worker fault (ack lost or late): 2)"; got != want {
					t.Errorf("DupSummary = %q, want %q", got, want)
				}
			},
		},
		{
			// The logs are read worker by worker: the run of the killed
			// worker can come after the later run of another.
			name: "duplicate explained by a fault, read out of order",
			h: history{
				enqueued: map[string]string{"a": "va"},
				execs: map[string][]checker.Execution{
					"a": {{Value: "va", Worker: "w2", Attempt: 2}, {Value: "va", Worker: "w1", Attempt: 1}},
				},
				results: []spool.Result{completed("a", "va")},
				faulted: map[string]string{"w1": "SIGKILL"},
			},
			check: func(t *testing.T, r checker.Report) {
				if r.DuplicateExecutions != 1 || r.DupCauses["SIGKILL"] != 1 {
					t.Errorf("%d duplicate executions, causes %v; want 1 of SIGKILL", r.DuplicateExecutions, r.DupCauses)
				}
			},
		},
		{
			name: "duplicate after a retried enqueue, and a named unfaulted cause",
			h: history{
				enqueued:  map[string]string{"b": "vb"},
				attempted: map[string]string{"a": "va"},
				execs: map[string][]checker.Execution{
					"a": {exec("va", "w1"), exec("va", "w1")},
					"b": {exec("vb", "w1"), exec("vb", "w1")},
				},
				results: []spool.Result{completed("a", "va"), completed("b", "vb")},
				unfault: "acks lost in a server restart",
			},
			check: func(t *testing.T, r checker.Report) {
				if r.DupCauses[checker.CauseRepublished] != 1 || r.DupCauses["acks lost in a server restart"] != 1 {
					t.Errorf("causes %v", r.DupCauses)
				}
			},
		},
		{
			name: "expected retries are not duplicates",
			h: history{
				enqueued: map[string]string{"a": "va"},
				execs:    map[string][]checker.Execution{"a": {exec("va", "w1"), exec("va", "w1"), exec("va", "w1")}},
				results:  []spool.Result{completed("a", "va")},
				expect:   map[string]int{"a": 2},
			},
			check: func(t *testing.T, r checker.Report) {
				if r.DuplicateExecutions != 1 || r.Executions != 3 {
					t.Errorf("duplicates %d executions %d, want 1 and 3", r.DuplicateExecutions, r.Executions)
				}
			},
		},
		{
			name: "phantom result, execution and dead letter",
			h: history{
				enqueued: map[string]string{"a": "va"},
				execs:    map[string][]checker.Execution{"a": {exec("va", "w1")}, "x": {exec("vx", "w1")}},
				results:  []spool.Result{completed("a", "va"), completed("y", "vy")},
				dead:     map[string]spool.Reason{"z": spool.ReasonPanic},
			},
			wantErr: "3 phantom: y: result completed but never enqueued; x: executed 1 times but never enqueued; z: dead letter but never enqueued",
		},
		{
			name: "unconfirmed publish that ran is recovered, not a phantom",
			h: history{
				enqueued:  map[string]string{"a": "va"},
				attempted: map[string]string{"b": "vb", "c": "vc"},
				execs:     map[string][]checker.Execution{"a": {exec("va", "w1")}, "b": {exec("vb", "w1")}},
				results:   []spool.Result{completed("a", "va"), completed("b", "vb")},
			},
			check: func(t *testing.T, r checker.Report) {
				if r.Unconfirmed != 2 || r.Recovered != 1 || r.Tasks != 1 {
					t.Errorf("report %+v", r)
				}
			},
		},
		{
			name: "wrong value",
			h: history{
				enqueued: map[string]string{"a": "va"},
				execs:    map[string][]checker.Execution{"a": {exec("vb", "w1")}},
				results:  []spool.Result{completed("a", "vb")},
			},
			wantErr: `a: executed with "vb", enqueued with "va"; a: completed with result "vb", enqueued with "va"`,
		},
		{
			name: "completed without execution",
			h: history{
				enqueued: map[string]string{"a": "va"},
				results:  []spool.Result{completed("a", "va")},
			},
			wantErr: "a: completed without any execution",
		},
		{
			name: "dead with its dead letter",
			h: history{
				enqueued: map[string]string{"a": "va", "b": "vb"},
				execs:    map[string][]checker.Execution{"a": {exec("va", "w1")}},
				results: []spool.Result{
					{ID: "a", State: spool.StateDead, Reason: spool.ReasonPanic},
					{ID: "b", State: spool.StateDead, Reason: spool.ReasonBadInput},
				},
				dead: map[string]spool.Reason{"a": spool.ReasonPanic, "b": spool.ReasonBadInput},
			},
			check: func(t *testing.T, r checker.Report) {
				if r.DeadTotal() != 2 || r.Dead[spool.ReasonPanic] != 1 || r.DeadSummary() != "2 (bad_input: 1, panic: 1)" {
					t.Errorf("dead %v (%s)", r.Dead, r.DeadSummary())
				}
			},
		},
		{
			name: "dead without a dead letter",
			h: history{
				enqueued: map[string]string{"a": "va"},
				results:  []spool.Result{{ID: "a", State: spool.StateDead, Reason: spool.ReasonTimeout}},
			},
			wantErr: "a: dead (timeout) without a dead letter",
		},
		{
			name: "dead letter with another reason",
			h: history{
				enqueued: map[string]string{"a": "va"},
				results:  []spool.Result{{ID: "a", State: spool.StateDead, Reason: spool.ReasonTimeout}},
				dead:     map[string]spool.Reason{"a": spool.ReasonPanic},
			},
			wantErr: "a: dead with reason timeout, dead letter says panic",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := tt.h.checker().Check()
			err := r.Err()
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("unexpected error: %v", err)
			case tt.wantErr != "" && err == nil:
				t.Fatalf("no error, want one with %q", tt.wantErr)
			case tt.wantErr != "" && !strings.Contains(err.Error(), tt.wantErr):
				t.Fatalf("error %q does not contain %q", err, tt.wantErr)
			}
			if tt.check != nil {
				tt.check(t, r)
			}
		})
	}
}

func TestExecutionLog(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	buf.Write(checker.FormatExecution("a", checker.Execution{Value: "v a\n\"x\"", Worker: "123", Attempt: 2}))
	buf.Write(checker.FormatExecution("b", checker.Execution{Value: "", Worker: "124", Attempt: 1}))
	buf.WriteString("c \"torn") // a process killed mid-line
	c := checker.New()
	lines, torn, err := checker.ReadExecutionLog(&buf, c)
	if err != nil {
		t.Fatal(err)
	}
	if lines != 2 || torn != 1 {
		t.Fatalf("lines %d torn %d, want 2 and 1", lines, torn)
	}
	c.Enqueued("a", "v a\n\"x\"")
	c.Enqueued("b", "")
	c.Result(spool.Result{ID: "a", State: spool.StateCompleted})
	c.Result(spool.Result{ID: "b", State: spool.StateCompleted})
	r := c.Check()
	if err := r.Err(); err != nil {
		t.Fatal(err)
	}
	if r.Executions != 2 {
		t.Fatalf("executions %d, want 2", r.Executions)
	}
}

func TestTable(t *testing.T) {
	t.Parallel()
	var tab checker.Table
	c := checker.New()
	c.Enqueued("a", "va")
	c.Executed("a", exec("va", "w1"))
	c.Executed("a", exec("va", "w2"))
	c.Faulted("w1", "SIGKILL")
	c.Result(completed("a", "va"))
	tab.Add(checker.Row{Scenario: "worker crash", Report: c.Check(), Faults: "1 SIGKILL"})
	out := tab.String()
	for _, want := range []string{"scenario", "worker crash", "1 SIGKILL", "1 (SIGKILL: 1)"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
}
