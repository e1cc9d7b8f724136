package checker

import (
	"fmt"
	"strings"
	"sync"
	"text/tabwriter"
	"time"
)

// Row is one scenario's line in the summary table.
type Row struct {
	Scenario string
	Report   Report
	// Faults describes the faults injected ("14 SIGKILL").
	Faults string
	// Lingering counts acknowledged tasks the server kept in the task
	// stream although every consumer had moved past them (not lost: their
	// results are terminal; the server removes them later, or never).
	Lingering int
	Wall      time.Duration
}

// Table collects the rows of a suite and prints them together. It is safe
// for concurrent use.
type Table struct {
	mu   sync.Mutex
	rows []Row
}

// Add appends a row.
func (t *Table) Add(r Row) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.rows = append(t.rows, r)
}

// Len is the number of rows.
func (t *Table) Len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.rows)
}

// String renders the table.
func (t *Table) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "scenario\ttasks\tfaults injected\tcompleted\tdead\tlost\tstuck\tphantom\tduplicate executions (cause)\tacked, left in stream\twall")
	for _, r := range t.rows {
		rep := r.Report
		fmt.Fprintf(tw, "%s\t%d\t%s\t%d\t%s\t%d\t%d\t%d\t%s\t%d\t%s\n", r.Scenario, rep.Tasks, r.Faults, rep.Completed,
			rep.DeadSummary(), len(rep.Lost), len(rep.Stuck), len(rep.Phantoms), rep.DupSummary(), r.Lingering, r.Wall.Round(100*time.Millisecond))
	}
	_ = tw.Flush() // writes to a strings.Builder, which cannot fail
	return b.String()
}
