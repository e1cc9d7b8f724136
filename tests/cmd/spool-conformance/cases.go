package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strings"
	"text/tabwriter"
	"time"
)

// Level is a conformance level of the contract.
type Level string

// The levels: a producer, a core worker, a full worker. A full worker must
// pass the core cases too.
const (
	Producer Level = "producer"
	Core     Level = "core"
	Full     Level = "full"
)

// levels is every level, for flag errors.
var levels = []Level{Producer, Core, Full}

// parseLevel checks a --level value.
func parseLevel(s string) (Level, error) {
	for _, l := range levels {
		if string(l) == s {
			return l, nil
		}
	}
	return "", fmt.Errorf("--level: %q is not one of producer, core, full", s)
}

// includes reports whether a kit run at level l runs the cases of level c.
func (l Level) includes(c Level) bool {
	switch l {
	case Full:
		return c == Core || c == Full
	default:
		return c == l
	}
}

// A Case is one check of the kit: it drives the command under test through
// the wire contract and returns nil when it passed.
type Case struct {
	// Name is level/what, the name --run matches.
	Name  string
	Level Level
	// Section is the contract section the case checks.
	Section string
	// Run is nil for a case not written yet, which reports "not covered".
	Run func(ctx context.Context, k *Kit) error
	// Why says, for a case not covered, what is missing.
	Why string
	// Consumers, when set, is the one pull mode the case applies to:
	// type or priority.
	Consumers string
}

// Outcome is one row of the table.
type Outcome struct {
	Case    Case
	Verdict string
	Why     string
	Took    time.Duration
}

// Verdicts of a row.
const (
	Pass       = "pass"
	Fail       = "fail"
	NotCovered = "not covered"
)

// allCases is every case of every level, in the order they run.
func allCases() []Case {
	var all []Case
	all = append(all, producerCases()...)
	all = append(all, coreCases()...)
	all = append(all, fleetCases()...)
	all = append(all, fullCases()...)
	return all
}

// selectCases returns the cases of level whose name matches run (all when
// run is empty); those skip matches are not to run.
func selectCases(level Level, run, skip string) ([]Case, error) {
	var re, skipRe *regexp.Regexp
	var err error
	if run != "" {
		if re, err = regexp.Compile(run); err != nil {
			return nil, fmt.Errorf("--run: %w", err)
		}
	}
	if skip != "" {
		if skipRe, err = regexp.Compile(skip); err != nil {
			return nil, fmt.Errorf("--skip: %w", err)
		}
	}
	var out []Case
	for _, c := range allCases() {
		if !level.includes(c.Level) || (re != nil && !re.MatchString(c.Name)) {
			continue
		}
		if skipRe != nil && skipRe.MatchString(c.Name) {
			c.Run, c.Why = nil, "skipped with --skip"
		}
		out = append(out, c)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("--run %q selects no case of level %s", run, level)
	}
	return out, nil
}

// runCase runs one case under its timeout and turns its error into a row.
func runCase(ctx context.Context, k *Kit, c Case, o options) Outcome {
	timeout := o.timeout
	if c.Run == nil {
		return Outcome{Case: c, Verdict: NotCovered, Why: c.Why}
	}
	if c.Consumers != "" && c.Consumers != o.consumers {
		return Outcome{Case: c, Verdict: NotCovered, Why: "applies where workers pull by " + c.Consumers + " (--consumers " + c.Consumers + ")"}
	}
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	start := time.Now()
	err := c.Run(cctx, k)
	row := Outcome{Case: c, Verdict: Pass, Took: time.Since(start)}
	if err != nil {
		row.Verdict = Fail
		row.Why = err.Error()
		if errors.Is(err, context.DeadlineExceeded) && cctx.Err() != nil {
			row.Why = fmt.Sprintf("timed out after %s: %s", timeout, err)
		}
	}
	return row
}

// printTable writes the rows and a closing count line.
func printTable(w io.Writer, rows []Outcome) (failed int) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "CASE\tRESULT\tTOOK\tCONTRACT\tWHY")
	var passed, open int
	for _, r := range rows {
		took := "-"
		if r.Took > 0 {
			took = r.Took.Round(10 * time.Millisecond).String()
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", r.Case.Name, r.Verdict, took, r.Case.Section, oneLine(r.Why))
		switch r.Verdict {
		case Pass:
			passed++
		case Fail:
			failed++
		default:
			open++
		}
	}
	_ = tw.Flush() // the table goes to stdout; a broken pipe is not worth reporting
	fmt.Fprintf(w, "%d cases: %d pass, %d fail, %d not covered\n", len(rows), passed, failed, open)
	return failed
}

// oneLine keeps a reason on one table row.
func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

// printList writes the cases of level, one a line, with their sections.
func printList(w io.Writer, cases []Case) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, c := range cases {
		state := ""
		if c.Run == nil {
			state = "(not covered)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", c.Name, c.Section, state)
	}
	_ = tw.Flush() // as in printTable
}
