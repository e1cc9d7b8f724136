package main

import (
	"regexp"
	"strconv"
	"strings"
)

var (
	flowRe      = regexp.MustCompile(`^flow control: (.+), concurrency (\d+) \(tasks/s\)$`)
	rateRuleRe  = regexp.MustCompile(`^rate limit (\d+)/s$`)
	holAloneRe  = regexp.MustCompile(`^no head-of-line blocking: unlimited type alone, concurrency (\d+) \(tasks/s\)$`)
	holBesideRe = regexp.MustCompile(`^no head-of-line blocking: unlimited type beside a backlogged type limited to (\d+), concurrency (\d+) \(tasks/s\)$`)
)

const holRatioRow = "no head-of-line blocking: unlimited type's throughput beside the limited type / alone (×)"

// flowRule is one rule's row of the limits scenario.
type flowRule struct {
	name, row, conc string
}

func (r *report) flowRules(mode string) []flowRule {
	var out []flowRule
	for _, sm := range r.matches(mode, flowRe) {
		out = append(out, flowRule{name: sm[1], row: strings.TrimSuffix(sm[0], " (tasks/s)"), conc: sm[2]})
	}
	return out
}

// flowFigures returns a rule's tasks/s, CPU per task and hand-backs per
// task.
func (r *report) flowFigures(mode string, fr flowRule) (tput, cpu, hb float64, ok [3]bool) {
	tput, ok[0] = r.get(mode, fr.row+" (tasks/s)", "spool")
	cpu, ok[1] = r.get(mode, fr.row+", CPU per task: consumer + server (µs)", "spool")
	hb, ok[2] = r.get(mode, fr.row+", hand-backs per task", "spool")
	return
}

// flowControl renders each rule's throughput against the unlimited
// type's, its cost and its hand-backs, then the head-of-line rows.
func (r *report) flowControl() {
	var rows, hol [][]string
	for _, mode := range r.modes() {
		rules := r.flowRules(mode)
		var free float64
		var okFree bool
		for _, fr := range rules {
			if fr.name == "unlimited" {
				free, _, _, _ = r.flowFigures(mode, fr)
				okFree = true
			}
		}
		for _, fr := range rules {
			tput, cpu, hb, ok := r.flowFigures(mode, fr)
			// A rate-limited type is compared with its rate, the others
			// with the unlimited type.
			against, reached := ratioCell(tput, ok[0], free, okFree), ""
			raw := r.cellOf(mode, fr.row+", CPU per task: consumer + server (µs)", "raw")
			if sm := rateRuleRe.FindStringSubmatch(fr.name); sm != nil {
				rate, _ := strconv.ParseFloat(sm[1], 64)
				against, reached = "", ratioCell(tput, ok[0], rate, rate > 0)
			}
			rows = append(rows, []string{modeLabels[mode], fr.name, cell(tput, ok[0]), against,
				r.cellOf(mode, fr.row+" (tasks/s)", "raw"), r.rawAgainst(mode, fr), reached, cell(cpu, ok[1]), raw, cell(hb, ok[2])})
		}
		for _, a := range r.matches(mode, holAloneRe) {
			alone, okA := r.get(mode, a[0], "spool")
			for _, b := range r.matches(mode, holBesideRe) {
				beside, okB := r.get(mode, b[0], "spool")
				r.get(mode, holRatioRow, "spool")
				hol = append(hol, []string{modeLabels[mode], b[1], cell(alone, okA), cell(beside, okB), ratioCell(beside, okB, alone, okA)})
			}
		}
	}
	if len(rows)+len(hol) == 0 {
		return
	}
	r.printf("## Flow control\n\nOne type with a rule, a worker of 100 slots. *Raw*, the floor of each rule: for the unlimited type and the per-key limit, nats.go `Consume` feeding a pool of 100 goroutines that store each result and ack once it is stored, the per-key run also taking a slot per key with a KV create (TTL) and freeing it with a delete; for a rate, `Consume` with its defaults acking the same queued tasks at the same rate. CPU per task is consumer + server.\n\n")
	r.table([]string{"setup", "rule", "tasks/s", "/ unlimited", "raw tasks/s", "raw / raw unlimited", "rate reached", "CPU per task (µs)", "raw: CPU per task (µs)", "hand-backs per task"}, rows, 2)
	r.printf("No head-of-line blocking: an unlimited type alone, then beside a backlogged type with a concurrency limit (tasks/s):\n\n")
	r.table([]string{"setup", "limit of the other type", "alone", "beside it", "beside / alone"}, hol)
}

// rawAgainst is a rule's raw throughput over the raw unlimited type's.
func (r *report) rawAgainst(mode string, fr flowRule) string {
	if fr.name == "unlimited" {
		return ""
	}
	for _, free := range r.flowRules(mode) {
		if free.name == "unlimited" {
			a, okA := r.get(mode, fr.row+" (tasks/s)", "raw")
			b, okB := r.get(mode, free.row+" (tasks/s)", "raw")
			if okA && okB {
				return ratioCell(a, okA, b, okB)
			}
		}
	}
	return ""
}
