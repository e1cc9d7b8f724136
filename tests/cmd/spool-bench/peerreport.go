package main

import (
	"fmt"
	"regexp"
	"strings"
)

// redisPersistence says how redis-server persisted in a sync mode's run.
func redisPersistence(mode string) string {
	if mode == "SyncAlways" {
		return "`appendonly yes`, `appendfsync always`"
	}
	return fmt.Sprintf("RDB snapshots only (`save %s`)", redisSave)
}

// peerMethod explains the peer rows in a bullet; empty when the peers
// scenario did not run.
func peerMethod(p peerVersions) string {
	var b strings.Builder
	switch {
	case p.AsynqSkipped != "":
		fmt.Fprintf(&b, "- **Peers.** asynq skipped: %s.\n", p.AsynqSkipped)
	case p.Asynq != "":
		fmt.Fprintf(&b, "- **Peers.** asynq %s", p.Asynq)
		if p.BullMQ != "" {
			fmt.Fprintf(&b, " and BullMQ %s (Node.js %s, `tests/cmd/spool-bench/bullmq/bench.mjs`)", p.BullMQ, p.Node)
		}
		fmt.Fprintf(&b, " on a redis-server %s child, emptied between runs: %s in the default-sync setup, %s in the always one (every write fsynced before Redis replies). Same payloads, no-op handler and concurrency as Spool; completed tasks kept as Spool keeps its result documents (asynq `Retention`, BullMQ's default). Their consumer runs in a child process as Spool's does; CPU per task adds redis-server's, snapshot children included. asynq enqueues from %d goroutines (it has no batch); an idle asynq server polls every 0.5–1.5 s, so a second pickup row sets `TaskCheckInterval` to %s.",
			p.Redis, redisPersistence("default sync"), redisPersistence("SyncAlways"), asynqEnqueuers, asynqFastPoll)
		if p.BullMQSkipped != "" {
			fmt.Fprintf(&b, " BullMQ skipped: %s.", p.BullMQSkipped)
		}
		b.WriteString("\n")
	}
	return b.String()
}

// peerShown are the peer rows the report shows, with their short labels;
// the JSON sidecar keeps the others.
var peerShown = []struct {
	re    *regexp.Regexp
	label string
}{
	{regexp.MustCompile(`^processing: \d+ queued, concurrency (\d+) \(tasks/s\)$`), "processing c=$1 (tasks/s)"},
	{regexp.MustCompile(`^CPU per task: consumer \+ server, concurrency (\d+) \(µs\)$`), "CPU per task c=$1 (µs)"},
	{regexp.MustCompile(`^network writes per task: consumer, concurrency (\d+)$`), "writes per task c=$1"},
	{regexp.MustCompile(`^pickup at (\d+) tasks/s: (p50|p99) \(µs\)$`), "pickup $2 (µs)"},
	{regexp.MustCompile(`^pickup at \d+ tasks/s, asynq TaskCheckInterval (\w+): (p50|p99) \(µs\)$`), "pickup $2, asynq polling every $1 (µs)"},
	{regexp.MustCompile(`^enqueue: single task (p50|p99) \(µs\)$`), "single enqueue $1 (µs)"},
	{regexp.MustCompile(`^enqueue: batch throughput \(tasks/s\)$`), "batch enqueue (tasks/s)"},
}

// peers renders the peers' figures beside Spool's; rows of a peer figure
// the report does not show are left to the JSON sidecar.
func (r *report) peers() {
	var rows [][]string
	for _, mode := range r.modes() {
		for _, m := range r.f.Modes {
			if m.Name != mode {
				continue
			}
			for _, row := range m.Rows {
				_, okA := row.Values[variantAsynq]
				_, okB := row.Values[variantBullMQ]
				if !okA && !okB {
					continue
				}
				r.used[mode+"\x00"+row.Row] = true
				for _, s := range peerShown {
					if !s.re.MatchString(row.Row) {
						continue
					}
					label := s.re.ReplaceAllString(row.Row, s.label)
					sp, okS := r.get(mode, row.Row, "spool")
					as, okA := r.get(mode, row.Row, variantAsynq)
					bq, okB := r.get(mode, row.Row, variantBullMQ)
					if label == "batch enqueue (tasks/s)" && !okS {
						// Spool's batch figure is under its own row name.
						sp, okS = r.get(mode, "enqueue: batches waited one by one (tasks/s)", "spool")
					}
					rows = append(rows, []string{modeLabels[mode], label, cell(sp, okS), cell(as, okA), cell(bq, okB), ratioCell(sp, okS, as, okA), ratioCell(sp, okS, bq, okB)})
				}
			}
		}
	}
	if len(rows) == 0 {
		return
	}
	r.printf("## Peers on Redis: asynq and BullMQ\n\nSpool / peer above 1: Spool is faster (tasks/s) or costlier (µs, writes). An empty BullMQ column: not measured in this run.\n\n")
	r.table([]string{"setup", "figure", "Spool", "asynq", "BullMQ", "Spool / asynq", "Spool / BullMQ"}, rows, 2)
}
