// Package checker verifies a Spool run after the fact, in the manner of
// Jepsen's queue checker: every task a producer was told is stored must end
// with exactly one terminal result, completed or dead with its reason.
//
// A run feeds a Checker four histories:
//
//   - enqueues: Enqueued for every task whose publish JetStream
//     acknowledged (each with a unique value), Attempted for publishes
//     whose outcome is unknown (the ack was lost);
//   - executions: Executed for every handler run, read from the handlers'
//     logs;
//   - results: Result for every document of the results bucket;
//   - dead letters: DeadLetter for every message of the dead-letter stream.
//
// Check then reports lost tasks (acknowledged, no result at all), stuck
// tasks (a result that is not terminal), duplicate executions (allowed by
// at-least-once delivery, counted with their cause), phantoms (results or
// executions of tasks never enqueued), and corruption (a value that is not
// the one enqueued, a completed task never executed, a dead task without
// its dead letter).
package checker

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"unicode/utf8"

	spool "github.com/spoolq/spool/shared"
)

// Execution is one run of a handler on a task.
type Execution struct {
	// Value is the task's unique value as the handler saw it.
	Value string
	// Worker names the process that ran it (its pid, for the fault
	// worker).
	Worker string
	// Attempt is the delivery count the handler was given (0: unknown).
	Attempt int
}

// DeadLetter is one message of the dead-letter stream.
type DeadLetter struct {
	Reason spool.Reason
	// Attempts is the Spool-Attempts header.
	Attempts int
}

// Checker collects a run's histories. It is safe for concurrent use.
type Checker struct {
	mu          sync.Mutex
	enqueued    map[string]string // acknowledged: id → value
	attempted   map[string]string // outcome unknown: id → value
	executions  map[string][]Execution
	results     map[string]spool.Result
	deadLetters map[string][]DeadLetter
	faulted     map[string]string // worker → fault it suffered
	retried     map[string]bool   // enqueues acknowledged only after a failed attempt
	expected    map[string]int    // executions a task is meant to take (retries after failures)
	unfaulted   string            // cause of duplicates that no worker fault explains
}

// New returns an empty Checker.
func New() *Checker {
	return &Checker{
		enqueued:    map[string]string{},
		attempted:   map[string]string{},
		executions:  map[string][]Execution{},
		results:     map[string]spool.Result{},
		deadLetters: map[string][]DeadLetter{},
		faulted:     map[string]string{},
		retried:     map[string]bool{},
		expected:    map[string]int{},
		unfaulted:   CauseRedelivered,
	}
}

// Enqueued records a task whose publish was acknowledged. Recording the same
// id twice with the same value is harmless (a retried enqueue).
func (c *Checker) Enqueued(id, value string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if old, ok := c.enqueued[id]; ok && old != value {
		// Two values under one id: the second publish was deduplicated or
		// is a second task; keep the first, the check reports a mismatch
		// if the handler saw the other.
		return
	}
	c.enqueued[id] = value
	if _, ok := c.attempted[id]; ok {
		c.retried[id] = true
		delete(c.attempted, id)
	}
}

// Attempted records a publish whose ack never came: the task may or may not
// be stored. A result for it is not a phantom, and its absence is not a loss.
func (c *Checker) Attempted(id, value string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.enqueued[id]; ok {
		return
	}
	c.attempted[id] = value
}

// Unresolved returns the ids of the tasks enqueued (acknowledged or
// attempted) that have no result yet, or one that is not final, sorted: a
// watch served by a lagging replica shows an older revision as well as
// none.
func (c *Checker) Unresolved() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var ids []string
	for _, m := range []map[string]string{c.enqueued, c.attempted} {
		for id := range m {
			if doc, ok := c.results[id]; !ok || !doc.State.Terminal() {
				ids = append(ids, id)
			}
		}
	}
	slices.Sort(ids)
	return ids
}

// ExpectExecutions says task id is meant to run n times (a handler that
// fails or panics n-1 times, then succeeds or is dead-lettered): only runs
// beyond n are duplicates. The default is 1.
func (c *Checker) ExpectExecutions(id string, n int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.expected[id] = n
}

// Executed records one handler run of task id.
func (c *Checker) Executed(id string, e Execution) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.executions[id] = append(c.executions[id], e)
}

// Executions returns the recorded handler runs of task id.
func (c *Checker) Executions(id string) []Execution {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.executions[id])
}

// Result records the (latest) result document of a task.
func (c *Checker) Result(doc spool.Result) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.results[doc.ID] = doc
}

// DeadLetter records a dead letter of task id.
func (c *Checker) DeadLetter(id string, d DeadLetter) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.deadLetters[id] = append(c.deadLetters[id], d)
}

// Faulted records that worker suffered a fault (killed, paused, cut off):
// a task it ran may be run again by another worker.
func (c *Checker) Faulted(worker, fault string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.faulted[worker] = fault
}

// maxDupDetails bounds Report.DupDetails.
const maxDupDetails = 10

// Causes of duplicate executions that no worker fault explains.
const (
	// CauseRedelivered: a live worker's ack was lost or came after
	// AckWait, so the task was delivered again.
	CauseRedelivered = "redelivered without a worker fault (ack lost or late)"
	// CauseRepublished: the producer retried an enqueue whose ack was
	// lost; the first copy may have been stored and consumed already.
	CauseRepublished = "enqueue retried after a lost ack"
)

// ExplainUnfaulted names the cause of duplicates that no worker fault
// explains (default CauseRedelivered), e.g. "acks lost in a server
// restart".
func (c *Checker) ExplainUnfaulted(cause string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.unfaulted = cause
}

// Check compares the histories and returns the report.
func (c *Checker) Check() Report {
	c.mu.Lock()
	defer c.mu.Unlock()
	r := Report{
		Tasks:       len(c.enqueued),
		Dead:        map[spool.Reason]int{},
		DupCauses:   map[string]int{},
		Unconfirmed: len(c.attempted),
	}
	for _, id := range slices.Sorted(maps.Keys(c.enqueued)) {
		value := c.enqueued[id]
		execs := c.executions[id]
		r.Executions += len(execs)
		for _, e := range execs {
			if e.Value != value {
				r.Mismatched = append(r.Mismatched, fmt.Sprintf("%s: executed with %q, enqueued with %q", id, e.Value, value))
			}
		}
		if extra := len(execs) - max(1, c.expected[id]); extra > 0 {
			r.Duplicated++
			r.DuplicateExecutions += extra
			r.DupCauses[c.cause(id, execs)] += extra
			if len(r.DupDetails) < maxDupDetails {
				runs := make([]string, len(execs))
				for i, e := range execs {
					runs[i] = fmt.Sprintf("worker %s delivery %d", e.Worker, e.Attempt)
				}
				r.DupDetails = append(r.DupDetails, id+": "+strings.Join(runs, ", "))
			}
		}
		doc, ok := c.results[id]
		switch {
		case !ok:
			r.Lost = append(r.Lost, id)
			continue
		case !doc.State.Terminal():
			r.Stuck = append(r.Stuck, fmt.Sprintf("%s: %s after %d attempts (worker %s)", id, doc.State, doc.Attempts, doc.Worker))
			continue
		case doc.State == spool.StateCompleted:
			r.Completed++
			if len(execs) == 0 {
				r.Mismatched = append(r.Mismatched, fmt.Sprintf("%s: completed without any execution in the handler logs", id))
			}
			// A value the handler returned as a JSON string (fault.task) went
			// through json.Marshal, which puts U+FFFD for invalid UTF-8, so
			// only text values compare; output stored in base64 (fault.echo
			// returns its payload as is) compares byte for byte.
			if got, ok := resultValue(doc); ok && (doc.ResultEncoding != "" || utf8.ValidString(value)) && got != value {
				r.Mismatched = append(r.Mismatched, fmt.Sprintf("%s: completed with result %q, enqueued with %q", id, got, value))
			}
		case doc.State == spool.StateCancelled:
			r.Cancelled++
		case doc.State == spool.StateDead:
			r.Dead[doc.Reason]++
			dls := c.deadLetters[id]
			if len(dls) == 0 {
				r.Mismatched = append(r.Mismatched, fmt.Sprintf("%s: dead (%s) without a dead letter", id, doc.Reason))
			} else if dls[len(dls)-1].Reason != doc.Reason {
				r.Mismatched = append(r.Mismatched, fmt.Sprintf("%s: dead with reason %s, dead letter says %s", id, doc.Reason, dls[len(dls)-1].Reason))
			}
		}
		if n := len(c.deadLetters[id]); n > 1 {
			r.Mismatched = append(r.Mismatched, fmt.Sprintf("%s: %d dead letters", id, n))
		}
	}
	for _, id := range slices.Sorted(maps.Keys(c.attempted)) {
		if doc, ok := c.results[id]; ok && doc.State.Terminal() {
			r.Recovered++
		}
		r.Executions += len(c.executions[id])
	}
	known := func(id string) bool {
		_, a := c.enqueued[id]
		_, b := c.attempted[id]
		return a || b
	}
	for _, id := range slices.Sorted(maps.Keys(c.results)) {
		if !known(id) {
			r.Phantoms = append(r.Phantoms, fmt.Sprintf("%s: result %s but never enqueued", id, c.results[id].State))
		}
	}
	for _, id := range slices.Sorted(maps.Keys(c.executions)) {
		if !known(id) {
			r.Phantoms = append(r.Phantoms, fmt.Sprintf("%s: executed %d times but never enqueued", id, len(c.executions[id])))
		}
	}
	for _, id := range slices.Sorted(maps.Keys(c.deadLetters)) {
		if !known(id) {
			r.Phantoms = append(r.Phantoms, fmt.Sprintf("%s: dead letter but never enqueued", id))
		}
	}
	return r
}

// cause explains the extra executions of task id: the fault of a worker
// that ran it before the last run, else a retried enqueue, else the
// unfaulted cause. The executions come in the order the logs were read,
// worker by worker, so the last run is the one of the highest attempt.
func (c *Checker) cause(id string, execs []Execution) string {
	last := 0
	for i, e := range execs {
		if e.Attempt >= execs[last].Attempt {
			last = i
		}
	}
	for i, e := range execs {
		if f, ok := c.faulted[e.Worker]; ok && i != last {
			return f
		}
	}
	if c.retried[id] {
		return CauseRepublished
	}
	return c.unfaulted
}

// resultValue reads the value a handler returned: its output when stored in
// base64, else a result that is a JSON string; ok is false for anything
// else.
func resultValue(doc spool.Result) (string, bool) {
	if doc.ResultEncoding != "" {
		out, err := doc.Output()
		return string(out), err == nil
	}
	if len(doc.Result) == 0 {
		return "", false
	}
	var s string
	if err := json.Unmarshal(doc.Result, &s); err != nil {
		return "", false
	}
	return s, true
}

// Report is the outcome of Check.
type Report struct {
	// Tasks is the number of acknowledged enqueues.
	Tasks int
	// Unconfirmed publishes had no ack; Recovered of them ran anyway.
	Unconfirmed, Recovered int
	// Completed tasks, Cancelled ones, and Dead ones by reason.
	Completed int
	Cancelled int
	Dead      map[spool.Reason]int
	// Executions counts handler runs of recorded tasks.
	Executions int
	// Duplicated tasks ran more than once, DuplicateExecutions times
	// beyond the first in all, by cause.
	Duplicated          int
	DuplicateExecutions int
	DupCauses           map[string]int
	// DupDetails lists the runs of the first maxDupDetails duplicated
	// tasks: which worker ran each, on which delivery (a second run on
	// delivery 1 is a second stored copy, on a later one a redelivery).
	DupDetails []string
	// Lost tasks were acknowledged and have no result; Stuck ones have a
	// result that is not terminal.
	Lost  []string
	Stuck []string
	// Phantoms are results, executions or dead letters of ids never
	// enqueued.
	Phantoms []string
	// Mismatched lists corrupted histories: wrong values, completed
	// without execution, dead without a dead letter.
	Mismatched []string
}

// DeadTotal is the number of dead tasks.
func (r Report) DeadTotal() int {
	n := 0
	for _, v := range r.Dead {
		n += v
	}
	return n
}

// Err is nil when nothing was lost, stuck, invented or corrupted.
// Duplicate executions are no error: at-least-once allows them.
func (r Report) Err() error {
	var problems []string
	add := func(what string, items []string) {
		if len(items) == 0 {
			return
		}
		shown := items[:min(len(items), 10)]
		problems = append(problems, fmt.Sprintf("%d %s: %s", len(items), what, strings.Join(shown, "; ")))
	}
	add("lost", r.Lost)
	add("stuck", r.Stuck)
	add("phantom", r.Phantoms)
	add("corrupted", r.Mismatched)
	if len(problems) == 0 {
		return nil
	}
	return fmt.Errorf("checker: %s", strings.Join(problems, "\n"))
}

// DupSummary describes the duplicate executions and their causes in one
// line: "12 (SIGKILL between handler and ack: 12)".
func (r Report) DupSummary() string {
	if r.DuplicateExecutions == 0 {
		return "0"
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(r.DupCauses)) {
		parts = append(parts, fmt.Sprintf("%s: %d", k, r.DupCauses[k]))
	}
	return fmt.Sprintf("%d (%s)", r.DuplicateExecutions, strings.Join(parts, ", "))
}

// DeadSummary lists the dead tasks by reason: "3 (panic: 1, timeout: 2)".
func (r Report) DeadSummary() string {
	if r.DeadTotal() == 0 {
		return "0"
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(r.Dead)) {
		parts = append(parts, fmt.Sprintf("%s: %d", k, r.Dead[k]))
	}
	return fmt.Sprintf("%d (%s)", r.DeadTotal(), strings.Join(parts, ", "))
}
