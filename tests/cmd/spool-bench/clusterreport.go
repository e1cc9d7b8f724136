package main

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

var (
	leaderRe = regexp.MustCompile(`^leader change, (.+) of the task stream leader: longest gap between completions \(ms\)$`)
	partRe   = regexp.MustCompile(`^(\d+) partitions?: (.+)$`)
)

// partitionsMode is the mode of the partitions scenario's rows.
const partitionsMode = "cluster R3, task partitions"

// leaderChange renders the stall a leader change causes in the cluster.
func (r *report) leaderChange() {
	var rows [][]string
	for _, mode := range r.modes() {
		for _, sm := range r.matches(mode, leaderRe) {
			raw, okR := r.get(mode, sm[0], "raw")
			sp, okS := r.get(mode, sm[0], "spool")
			rows = append(rows, []string{modeLabels[mode], sm[1], cell(raw, okR), cell(sp, okS)})
		}
	}
	if len(rows) == 0 {
		return
	}
	r.printf("## Leader change\n\nThe longest gap between two completions after the task stream's leader changes (ms).\n\n")
	r.table([]string{"setup", "how", "raw", "Spool"}, rows, 2)
}

// partitions renders the task partitions scenario, one row per partition
// count.
func (r *report) partitions() {
	byK := map[string]map[string]string{} // k → rest of the row name → full name
	var ks []string
	for _, sm := range r.matches(partitionsMode, partRe) {
		if byK[sm[1]] == nil {
			byK[sm[1]] = map[string]string{}
			ks = append(ks, sm[1])
		}
		byK[sm[1]][sm[2]] = sm[0]
	}
	var rows [][]string
	for _, k := range ks {
		names := byK[k]
		get := func(rest, variant string) (float64, bool) {
			name, ok := names[rest]
			if !ok {
				return 0, false
			}
			return r.get(partitionsMode, name, variant)
		}
		proc := "processing, concurrency " + strconv.Itoa(partitionConc) + " per partition (tasks/s)"
		raw, okR := get(proc, "raw")
		rawRes, okRR := get(proc, "raw-results")
		sp, okS := get(proc, "spool")
		kn, _ := strconv.Atoi(k)
		one := "processing, one worker pulling every partition, concurrency %d (tasks/s)"
		w1, ok1 := get(strings.Replace(one, "%d", strconv.Itoa(partitionConc), 1), "spool")
		wk, okK := get(strings.Replace(one, "%d", strconv.Itoa(partitionConc*kn), 1), "spool")
		leaders, okL := get("servers leading a task partition", "raw")
		pub, okP := get("enqueue, PublishAsync over "+strconv.Itoa(partitionTypes)+" types (tasks/s)", "raw")
		servers := ""
		if okL {
			servers = fmt.Sprintf("%.0f", leaders)
		}
		rows = append(rows, []string{k, servers, cell(pub, okP), cell(raw, okR), cell(rawRes, okRR), cell(sp, okS), ratioCell(sp, okS, raw, okR), cell(w1, ok1), cell(wk, okK && kn > 1)})
	}
	if len(rows) == 0 {
		return
	}
	r.printf("## Task partitions\n\nR3, default sync: raw publishing over %d types through the servers' mapping, and processing with a consumer per partition at concurrency %d each, raw (Fetch(32) + Ack; *+ results*: each batch's results stored in the one results bucket first) and a Spool worker pinned to each; then one Spool worker pulling every partition (tasks/s).\n\n", partitionTypes, partitionConc)
	r.table([]string{"partitions", "servers leading one", "raw publish", "raw processing", "raw + results", "Spool pinned", "Spool / raw", "one worker, c=100", "one worker, c=100 per partition"}, rows)
}
