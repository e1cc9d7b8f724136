package main

import (
	"fmt"
	"strconv"
	"strings"
)

// The verdicts of the target table.
const (
	verdictMet    = "met"
	verdictNotMet = "not met"
	verdictNone   = "not measured"
)

// target is one row of the target table: a figure of the run, at most
// (atMost) or at least bound. eval returns the figure, the figures it
// comes from, and whether the run measured them.
type target struct {
	what   string
	bound  float64
	atMost bool
	unit   string // empty: a ratio
	eval   func() (v float64, from string, ok bool)
}

const (
	modeDefault = "default sync"
	modeAlways  = "SyncAlways"
	modeR3      = "cluster R3, default sync"
)

// ratio is a figure of one row and variant over another's.
func (r *report) ratio(mode, rowA, varA, rowB, varB, unit string) (float64, string, bool) {
	a, okA := r.get(mode, rowA, varA)
	b, okB := r.get(mode, rowB, varB)
	if !okA || !okB || b == 0 {
		return 0, "", false
	}
	return a / b, fmt.Sprintf("%s / %s %s", fmtNum(a), fmtNum(b), unit), true
}

// procTarget is Spool's processing throughput over a baseline's.
func (r *report) procTarget(mode string, c int, suffix, base string) func() (float64, string, bool) {
	return func() (float64, string, bool) {
		row, ok := r.procRow(mode, c, suffix)
		if !ok {
			return 0, "", false
		}
		plain, _ := r.procRow(mode, c, "")
		return r.ratio(mode, row, "spool", plain, base, "tasks/s")
	}
}

// againstRaw is procTarget against raw, its detail also giving raw +
// results over raw in the same run: what a client that stores each
// result, as Spool does, reaches of raw's throughput.
func (r *report) againstRaw(mode string, c int, suffix string) func() (float64, string, bool) {
	return r.withFloor(mode, c, r.procTarget(mode, c, suffix, "raw"), "raw-results", "raw", "; raw + results: %.2f× raw")
}

// withDuty adds to a processing target's detail what raw + Spool's writes
// reaches of raw + results in the same run at concurrency c: the floor of
// a worker that stores Spool's document and sends its events.
func (r *report) withDuty(mode string, c int, target func() (float64, string, bool)) func() (float64, string, bool) {
	return r.withFloor(mode, c, target, "raw-duty", "raw-results", "; raw + Spool's writes: %.2f×")
}

// withFloor adds to a target's detail, as format, a floor's throughput
// over base's, both processing at concurrency c in the same run.
func (r *report) withFloor(mode string, c int, target func() (float64, string, bool), floor, base, format string) func() (float64, string, bool) {
	return func() (float64, string, bool) {
		v, detail, ok := target()
		if !ok {
			return v, detail, ok
		}
		plain, _ := r.procRow(mode, c, "")
		if f, _, okF := r.ratio(mode, plain, floor, plain, base, ""); okF {
			detail += fmt.Sprintf(format, f)
		}
		return v, detail, ok
	}
}

// flowRule finds a default-sync rule of the limits scenario by the start
// of its name.
func (r *report) flowRule(prefix string) (flowRule, bool) {
	for _, fr := range r.flowRules(modeDefault) {
		if strings.HasPrefix(fr.name, prefix) {
			return fr, true
		}
	}
	return flowRule{}, false
}

// againstUnlimited is a rule's throughput over the unlimited type's.
func (r *report) againstUnlimited(prefix string) func() (float64, string, bool) {
	return func() (float64, string, bool) {
		fr, ok := r.flowRule(prefix)
		free, okF := r.flowRule("unlimited")
		if !ok || !okF {
			return 0, "", false
		}
		v, detail, ok := r.ratio(modeDefault, fr.row+" (tasks/s)", "spool", free.row+" (tasks/s)", "spool", "tasks/s")
		if raw, _, okRaw := r.ratio(modeDefault, fr.row+" (tasks/s)", "raw", free.row+" (tasks/s)", "raw", ""); ok && okRaw {
			detail += fmt.Sprintf("; raw: %.2f×", raw)
		}
		return v, detail, ok
	}
}

// flowFigure is one per-task figure of a rule (", hand-backs per task" or
// ", CPU per task: consumer + server (µs)").
func (r *report) flowFigure(prefix, suffix string) func() (float64, string, bool) {
	return func() (float64, string, bool) {
		fr, ok := r.flowRule(prefix)
		if !ok {
			return 0, "", false
		}
		v, ok := r.get(modeDefault, fr.row+suffix, "spool")
		detail := ""
		if raw, okRaw := r.get(modeDefault, fr.row+suffix, "raw"); okRaw {
			detail = fmt.Sprintf("raw at the rate: %s", fmtNum(raw))
		}
		return v, detail, ok
	}
}

// rateReached is a rate-limited type's throughput over its rate.
func (r *report) rateReached(rate int) func() (float64, string, bool) {
	return func() (float64, string, bool) {
		fr, ok := r.flowRule(fmt.Sprintf("rate limit %d/s", rate))
		if !ok {
			return 0, "", false
		}
		v, ok := r.get(modeDefault, fr.row+" (tasks/s)", "spool")
		return v / float64(rate), fmt.Sprintf("%s tasks/s", fmtNum(v)), ok
	}
}

// targetList is every target of the performance and fleet work that the
// bench measures.
func (r *report) targetList() []target {
	cpu100 := cpuRow(100, "")
	ts := []target{
		{"processing c=10 ≥ 0.8× raw + results", 0.8, false, "", r.withDuty(modeDefault, 10, r.procTarget(modeDefault, 10, "", "raw-results"))},
		{"processing c=100 ≥ 0.9× raw + results", 0.9, false, "", r.withDuty(modeDefault, 100, r.procTarget(modeDefault, 100, "", "raw-results"))},
		{"CPU per task c=100 ≤ 1.15× raw + results", 1.15, true, "", func() (float64, string, bool) {
			v, detail, ok := r.ratio(modeDefault, cpu100, "spool", cpu100, "raw-results", "µs")
			if duty, _, okD := r.ratio(modeDefault, cpu100, "raw-duty", cpu100, "raw-results", ""); ok && okD {
				detail += fmt.Sprintf("; raw + Spool's writes: %.2f×", duty)
			}
			return v, detail, ok
		}},
		{"worker events ≤ 5% of the worker's CPU per task, c=100", 0.05, true, "", func() (float64, string, bool) {
			on, okOn := r.get(modeDefault, consumerCPURow(100, ""), "spool")
			off, okOff := r.get(modeDefault, consumerCPURow(100, ", worker events off"), "spool")
			if !okOn || !okOff || on == 0 {
				return 0, "", false
			}
			return 1 - off/on, fmt.Sprintf("%s µs on, %s off", fmtNum(on), fmtNum(off)), true
		}},
		{"always: processing c=10 ≥ 0.9× raw + results", 0.9, false, "", r.procTarget(modeAlways, 10, "", "raw-results")},
		{"always: processing c=100 ≥ 0.9× raw + results", 0.9, false, "", r.procTarget(modeAlways, 100, "", "raw-results")},
		{"results discarded c=10 ≥ 0.5× raw", 0.5, false, "", r.againstRaw(modeDefault, 10, ", results discarded")},
		{"results discarded c=100 ≥ 0.8× raw", 0.8, false, "", r.againstRaw(modeDefault, 100, ", results discarded")},
		{"processing c=10 ≥ 2× BullMQ", 2, false, "", r.procTarget(modeDefault, 10, "", variantBullMQ)},
		{"processing c=50 ≥ 2× BullMQ", 2, false, "", r.procTarget(modeDefault, 50, "", variantBullMQ)},
		{"pickup p99 ≤ BullMQ's", 1, true, "", r.pickupTarget(variantBullMQ)},
		{"R3: processing c=100 ≥ 0.5× raw R3", 0.5, false, "", r.againstRaw(modeR3, 100, "")},
		{"partitions 1 → 3: Spool's gain ≥ raw's", 1, false, "", r.partitionGain},
		{"concurrency limit 50 ≥ 0.5× unlimited", 0.5, false, "", r.againstUnlimited("concurrency limit 50")},
		{"hand-backs per task, concurrency limit 50 ≤ 0.05", 0.05, true, "per task", r.flowFigure("concurrency limit 50", ", hand-backs per task")},
		{"unlimited type beside one limited to 5 ≥ 0.9× alone", 0.9, false, "", r.headOfLine},
		{"per-key limit 1 ≥ 0.7× unlimited", 0.7, false, "", r.againstUnlimited("per-key limit 1")},
	}
	for _, rate := range []int{200, 2000} {
		ts = append(ts, target{fmt.Sprintf("CPU per task, rate %s/s ≤ 100 µs", fmtNum(float64(rate))), 100, true, "µs",
			r.flowFigure(fmt.Sprintf("rate limit %d/s", rate), ", CPU per task: consumer + server (µs)")})
	}
	ts = append(ts,
		target{"rate 2,000/s reached ≥ 95%", 0.95, false, "", r.rateReached(2000)},
		target{"another service's backlog: throughput ≥ 0.8× alone", 0.8, false, "", r.servicesTarget},
		target{"streaming enqueue ≥ 0.8× raw + Nats-Msg-Id", 0.8, false, "", func() (float64, string, bool) {
			const row = "enqueue: streaming (tasks/s)"
			return r.ratio(modeDefault, row, "spool", row, "raw+headers", "tasks/s")
		}},
		target{"pickup p99 ≤ 2× raw", 2, true, "", r.pickupTarget("raw")},
	)
	return ts
}

// targetRows renders the target table's rows with a verdict each.
func (r *report) targetRows() [][]string {
	var rows [][]string
	for _, t := range r.targetList() {
		v, from, ok := t.eval()
		if !ok {
			rows = append(rows, []string{t.what, verdictNone, "", ""})
			continue
		}
		verdict := verdictMet
		if (t.atMost && v > t.bound) || (!t.atMost && v < t.bound) {
			verdict = verdictNotMet
		}
		measured := fmtRatio(v)
		if t.unit != "" {
			measured = strings.TrimSpace(fmtNum(v) + " " + t.unit)
		}
		rows = append(rows, []string{t.what, verdict, measured, from})
	}
	return rows
}

func (r *report) pickupTarget(base string) func() (float64, string, bool) {
	return func() (float64, string, bool) {
		for _, sm := range r.matches(modeDefault, pickupRe) {
			if sm[2] == "p99" {
				return r.ratio(modeDefault, sm[0], "spool", sm[0], base, "µs")
			}
		}
		return 0, "", false
	}
}

// partitionGain is Spool's throughput gain from 1 to 3 partitions over
// raw's.
func (r *report) partitionGain() (float64, string, bool) {
	row := func(k int) string {
		label := strconv.Itoa(k) + " partitions"
		if k == 1 {
			label = "1 partition"
		}
		return fmt.Sprintf("%s: processing, concurrency %d per partition (tasks/s)", label, partitionConc)
	}
	s1, ok1 := r.get(partitionsMode, row(1), "spool")
	s3, ok3 := r.get(partitionsMode, row(3), "spool")
	r1, ok4 := r.get(partitionsMode, row(1), "raw")
	r3, ok5 := r.get(partitionsMode, row(3), "raw")
	if !ok1 || !ok3 || !ok4 || !ok5 || s1 == 0 || r1 == 0 || r3 == 0 {
		return 0, "", false
	}
	detail := fmt.Sprintf("Spool %s×, raw %s×", fmtRatio(s3/s1), fmtRatio(r3/r1))
	rr1, okRR1 := r.get(partitionsMode, row(1), "raw-results")
	rr3, okRR3 := r.get(partitionsMode, row(3), "raw-results")
	if okRR1 && okRR3 && rr1 > 0 {
		detail += fmt.Sprintf(", raw + results %s×", fmtRatio(rr3/rr1))
	}
	return (s3 / s1) / (r3 / r1), detail, true
}

// headOfLine is the unlimited type's throughput beside a type limited to 5
// over its throughput alone.
func (r *report) headOfLine() (float64, string, bool) {
	for _, a := range r.matches(modeDefault, holAloneRe) {
		for _, b := range r.matches(modeDefault, holBesideRe) {
			if b[1] == "5" {
				return r.ratio(modeDefault, b[0], "spool", a[0], "spool", "tasks/s")
			}
		}
	}
	return 0, "", false
}

// servicesTarget is a service's throughput beside another service's slow
// backlog over its throughput alone: a row that names a service and its
// throughput alone as a ratio (×).
func (r *report) servicesTarget() (float64, string, bool) {
	for _, m := range r.f.Modes {
		if m.Name != modeDefault {
			continue
		}
		for _, row := range m.Rows {
			if strings.Contains(row.Row, "service") && strings.Contains(row.Row, "alone") && strings.HasSuffix(row.Row, "(×)") {
				// Read without marking the row shown: its table is the last one.
				v, ok := row.Values["spool"]
				return v.Median, "", ok && v.Runs > 0
			}
		}
	}
	return 0, "", false
}
