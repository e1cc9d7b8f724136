package main

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// The processing scenario's Spool variants: the suffix of their rows and
// their column in the report.
var procVariants = []struct{ suffix, title string }{
	{", worker events off", "events off"},
	{", processing state written as every attempt starts", "state written"},
	{", results discarded", "discarded"},
}

var procRe = regexp.MustCompile(`^processing: \d+ queued, concurrency (\d+)(, .+)? \(tasks/s\)$`)

// procConcs returns the concurrencies a mode's processing rows have, in
// increasing order.
func (r *report) procConcs(mode string) []int {
	var cs []int
	for _, sm := range r.matches(mode, procRe) {
		c, _ := strconv.Atoi(sm[1])
		if !slices.Contains(cs, c) {
			cs = append(cs, c)
		}
	}
	slices.Sort(cs)
	return cs
}

// procRow names a mode's processing row at concurrency c with a variant's
// suffix.
func (r *report) procRow(mode string, c int, suffix string) (string, bool) {
	for _, sm := range r.matches(mode, procRe) {
		if sm[1] == strconv.Itoa(c) && sm[2] == suffix {
			return sm[0], true
		}
	}
	return "", false
}

// Per-task rows of the processing scenario at concurrency c.
func cpuRow(c int, suffix string) string {
	return fmt.Sprintf("CPU per task: consumer + server, concurrency %d%s (µs)", c, suffix)
}

func consumerCPURow(c int, suffix string) string {
	return fmt.Sprintf("CPU per task: consumer, concurrency %d%s (µs)", c, suffix)
}

func serverCPURow(c int, suffix string) string {
	return fmt.Sprintf("CPU per task: server, processing at concurrency %d%s (µs)", c, suffix)
}

func writesRow(c int, suffix string) string {
	return fmt.Sprintf("network writes per task: consumer, concurrency %d%s", c, suffix)
}

// processing renders three tables: throughput, CPU per task, and the
// consumer's and server's parts of it.
func (r *report) processing() {
	var tput, cpu, split [][]string
	acks := false
	for _, mode := range r.modes() {
		for _, c := range r.procConcs(mode) {
			row, _ := r.procRow(mode, c, "")
			if _, ok := r.get(mode, row, "raw-acksync"); ok {
				acks = true
			}
		}
	}
	for _, mode := range r.modes() {
		for _, c := range r.procConcs(mode) {
			label := []string{modeLabels[mode], strconv.Itoa(c)}
			row, _ := r.procRow(mode, c, "")
			raw, okR := r.get(mode, row, "raw")
			floor, okF := r.get(mode, row, "raw-results")
			sp, okS := r.get(mode, row, "spool")
			t := append(slices.Clone(label), cell(raw, okR), r.cellOf(mode, row, "raw-bounded"), cell(floor, okF), r.cellOf(mode, row, "raw-duty"))
			if acks {
				t = append(t, r.cellOf(mode, row, "raw-acksync"))
			}
			t = append(t, cell(sp, okS), ratioCell(sp, okS, floor, okF))
			cpuT, okCT := r.get(mode, cpuRow(c, ""), "spool")
			cpuF, okCF := r.get(mode, cpuRow(c, ""), "raw-results")
			u := append(slices.Clone(label), r.cellOf(mode, cpuRow(c, ""), "raw"), r.cellOf(mode, cpuRow(c, ""), "raw-bounded"), cell(cpuF, okCF), r.cellOf(mode, cpuRow(c, ""), "raw-duty"))
			if acks {
				u = append(u, r.cellOf(mode, cpuRow(c, ""), "raw-acksync"))
			}
			u = append(u, cell(cpuT, okCT), ratioCell(cpuT, okCT, cpuF, okCF))
			s := append(slices.Clone(label),
				r.cellOf(mode, consumerCPURow(c, ""), "raw-results"), r.cellOf(mode, serverCPURow(c, ""), "raw-results"),
				r.cellOf(mode, consumerCPURow(c, ""), "spool"), r.cellOf(mode, serverCPURow(c, ""), "spool"))
			for _, v := range procVariants {
				vrow, ok := r.procRow(mode, c, v.suffix)
				x, okX := r.get(mode, vrow, "spool")
				t = append(t, cell(x, ok && okX))
				u = append(u, r.cellOf(mode, cpuRow(c, v.suffix), "spool"))
				if v.title == "events off" {
					s = append(s, r.cellOf(mode, consumerCPURow(c, v.suffix), "spool"))
				}
				if v.title == "discarded" {
					t = append(t, ratioCell(x, ok && okX, raw, okR))
				}
				r.markVariant(mode, c, v.suffix)
			}
			s = append(s, r.cellOf(mode, writesRow(c, ""), "raw-results"), r.cellOf(mode, writesRow(c, ""), "spool"))
			r.markVariant(mode, c, "")
			tput, cpu, split = append(tput, t), append(cpu, u), append(split, s)
		}
	}
	if len(tput) == 0 {
		return
	}
	base := []string{"setup", "c", "raw", "raw, bounded", "raw + results", "raw + Spool's writes"}
	if acks {
		base = append(base, "raw, acks confirmed")
	}
	r.printf("## Processing\n\nTasks/s, no-op handler, at concurrency c. Spool's variants are in the last columns.\n\n")
	r.table(append(slices.Clone(base), "Spool", "Spool / raw + results", "events off", "state written", "discarded", "discarded / raw"), tput)
	r.printf("CPU per task, consumer + server (µs):\n\n")
	r.table(append(slices.Clone(base), "Spool", "Spool / raw + results", "events off", "state written", "discarded"), cpu)
	r.printf("Where it goes: CPU per task of the consumer and the server (µs), and the consumer's network writes per task:\n\n")
	r.table([]string{"setup", "c", "raw + results: consumer", "server", "Spool: consumer", "server", "events off: consumer", "writes: raw + results", "Spool"}, split)
}

// markVariant marks the per-task rows of a processing variant shown: the
// tables above carry what a reader needs, the JSON sidecar the rest.
func (r *report) markVariant(mode string, c int, suffix string) {
	for _, row := range []string{cpuRow(c, suffix), consumerCPURow(c, suffix), serverCPURow(c, suffix), writesRow(c, suffix)} {
		r.used[mode+"\x00"+row] = true
	}
}

// cellOf is the cell of one figure.
func (r *report) cellOf(mode, row, variant string) string {
	return cell(r.get(mode, row, variant))
}

// enqueue renders the enqueue scenario: throughput, CPU per task and the
// single enqueue's latency.
func (r *report) enqueue() {
	const stream, quiet, batch = "streaming", "streaming, no enqueued events", "batches waited one by one"
	tput := func(row string) string { return "enqueue: " + row + " (tasks/s)" }
	cpu := func(mode, row, variant string) string {
		p, okP := r.get(mode, "CPU per task: producer, "+row+" (µs)", variant)
		s, okS := r.get(mode, "CPU per task: server, "+row+" (µs)", variant)
		return cell(p+s, okP && okS)
	}
	var t, u, l [][]string
	for _, mode := range r.modes() {
		raw, okR := r.get(mode, tput(stream), "raw")
		hdr, okH := r.get(mode, tput(stream), "raw+headers")
		sp, okS := r.get(mode, tput(stream), "spool")
		q, okQ := r.get(mode, tput(quiet), "spool")
		rb, okRB := r.get(mode, tput(batch), "raw-bounded")
		sb, okSB := r.get(mode, tput(batch), "spool")
		r.get(mode, tput(quiet), "raw") // the streaming row's raw figures again
		if okR || okS || okSB {
			t = append(t, []string{modeLabels[mode], cell(raw, okR), cell(hdr, okH), cell(sp, okS),
				ratioCell(sp, okS, raw, okR), ratioCell(sp, okS, hdr, okH), cell(q, okQ), ratioCell(q, okQ, raw, okR),
				cell(rb, okRB), cell(sb, okSB), ratioCell(sb, okSB, rb, okRB)})
			u = append(u, []string{modeLabels[mode], cpu(mode, stream, "raw"), cpu(mode, stream, "raw+headers"),
				cpu(mode, stream, "spool"), cpu(mode, quiet, "spool"), cpu(mode, batch, "raw-bounded"), cpu(mode, batch, "spool")})
			r.get(mode, "CPU per task: producer, "+quiet+" (µs)", "raw")
			r.get(mode, "CPU per task: server, "+quiet+" (µs)", "raw")
		}
		p50r, ok1 := r.get(mode, "enqueue: single task p50 (µs)", "raw")
		p50s, ok2 := r.get(mode, "enqueue: single task p50 (µs)", "spool")
		p99r, ok3 := r.get(mode, "enqueue: single task p99 (µs)", "raw")
		p99s, ok4 := r.get(mode, "enqueue: single task p99 (µs)", "spool")
		if ok1 || ok2 {
			l = append(l, []string{modeLabels[mode], cell(p50r, ok1), cell(p50s, ok2), cell(p99r, ok3), cell(p99s, ok4), ratioCell(p99s, ok4, p99r, ok3)})
		}
	}
	if len(t)+len(l) == 0 {
		return
	}
	r.printf("## Enqueue\n\nTasks/s. Streaming: raw `PublishMsgAsync` without a header and with `Nats-Msg-Id`, Spool `EnqueueAsync`; batches of %s waited one by one: raw against `EnqueueBatch`.\n\n", fmtNum(float64(r.f.Counts.BatchSize)))
	r.table([]string{"setup", "raw", "raw + Nats-Msg-Id", "Spool", "Spool / raw", "Spool / raw + Nats-Msg-Id", "no enqueued events", "no events / raw", "raw batches", "EnqueueBatch", "EnqueueBatch / raw"}, t)
	r.printf("CPU per task, producer + server (µs):\n\n")
	r.table([]string{"setup", "raw", "raw + Nats-Msg-Id", "Spool", "no enqueued events", "raw batches", "EnqueueBatch"}, u)
	r.printf("A single enqueue, publish to acknowledgement (µs):\n\n")
	r.table([]string{"setup", "raw p50", "Spool p50", "raw p99", "Spool p99", "Spool / raw p99"}, l)
}

var pickupRe = regexp.MustCompile(`^pickup at (\d+) tasks/s: (p50|p99|max) \(µs\)$`)

// pickup renders the pickup latency, raw against Spool.
func (r *report) pickup() {
	var rows [][]string
	rate := ""
	for _, mode := range r.modes() {
		sm := r.matches(mode, pickupRe)
		if len(sm) == 0 {
			continue
		}
		rate = sm[0][1]
		row := func(q string) string { return "pickup at " + rate + " tasks/s: " + q + " (µs)" }
		p99r, okR := r.get(mode, row("p99"), "raw")
		p99s, okS := r.get(mode, row("p99"), "spool")
		if !okR && !okS {
			continue // a peers-only run: in the peers table
		}
		rows = append(rows, []string{modeLabels[mode], r.cellOf(mode, row("p50"), "raw"), r.cellOf(mode, row("p50"), "spool"),
			cell(p99r, okR), cell(p99s, okS), ratioCell(p99s, okS, p99r, okR), r.cellOf(mode, row("max"), "raw"), r.cellOf(mode, row("max"), "spool")})
	}
	if len(rows) == 0 {
		return
	}
	r.printf("## Pickup\n\nAn idle consumer, one task at a time at %s tasks/s: stream timestamp to handler start (µs).\n\n", rate)
	r.table([]string{"setup", "raw p50", "Spool p50", "raw p99", "Spool p99", "Spool / raw p99", "raw max", "Spool max"}, rows)
}

var shareRe = regexp.MustCompile(`^shares: (\w+) \(weight ([\d.]+)%, %\)$`)

// shares renders Spool's priority shares against the weights.
func (r *report) shares() {
	var head []string
	var rows [][]string
	for _, mode := range r.modes() {
		sm := r.matches(mode, shareRe)
		if len(sm) == 0 {
			continue
		}
		if head == nil {
			head = []string{"setup"}
			for _, s := range sm {
				head = append(head, fmt.Sprintf("%s (%s%%)", s[1], s[2]))
			}
			head = append(head, "largest deviation (pp)", "idle's longest wait: raw (ms)", "Spool (ms)")
		}
		row := []string{modeLabels[mode]}
		for _, s := range sm {
			row = append(row, r.cellOf(mode, s[0], "spool"))
			r.get(mode, s[0], "raw")
		}
		const dev, wait = "shares: largest deviation from the weights (pp)", "shares: longest wait of idle under saturation (ms)"
		r.get(mode, dev, "raw")
		row = append(row, r.cellOf(mode, dev, "spool"), r.cellOf(mode, wait, "raw"), r.cellOf(mode, wait, "spool"))
		rows = append(rows, row)
	}
	if len(rows) == 0 {
		return
	}
	r.printf("## Priority shares\n\nShare of the first starts per priority under saturation (%%), weights in the heading; raw round-robins (20%% each).\n\n")
	r.table(head, rows)
}

var (
	backlogRe    = regexp.MustCompile(`^backlog: (\d+) queued, concurrency (\d+) \(tasks/s\)$`)
	backlogRatio = regexp.MustCompile(`^backlog: throughput at (\d+) queued / at (\d+)$`)
)

// backlog renders throughput and memory with a small and a large backlog.
func (r *report) backlog() {
	var rows [][]string
	for _, mode := range r.modes() {
		for _, sm := range r.matches(mode, backlogRe) {
			q := sm[1]
			raw, okR := r.get(mode, sm[0], "raw")
			sp, okS := r.get(mode, sm[0], "spool")
			rss := "backlog: " + q + " queued, consumer RSS (MiB)"
			var lo [2]string
			for _, rm := range r.matches(mode, backlogRatio) {
				if rm[1] == q {
					lo = [2]string{r.cellOf(mode, rm[0], "raw"), r.cellOf(mode, rm[0], "spool")}
				}
			}
			qn, _ := strconv.Atoi(q)
			rows = append(rows, []string{modeLabels[mode], fmtNum(float64(qn)), cell(raw, okR), cell(sp, okS), ratioCell(sp, okS, raw, okR),
				r.cellOf(mode, rss, "raw"), r.cellOf(mode, rss, "spool"), lo[0], lo[1]})
		}
	}
	if len(rows) == 0 {
		return
	}
	r.printf("## Backlog\n\nThroughput at concurrency 100 with the backlog kept near its size, the consumer's peak RSS, and the throughput against the smallest backlog's.\n\n")
	r.table([]string{"setup", "queued", "raw (tasks/s)", "Spool (tasks/s)", "Spool / raw", "raw RSS (MiB)", "Spool RSS (MiB)", "raw / small backlog", "Spool / small backlog"}, rows)
}

// workflows renders workflows against the same work as plain tasks.
func (r *report) workflows() {
	re := regexp.MustCompile(`^workflow: (.+)$`)
	var rows [][]string
	for _, mode := range r.modes() {
		for _, sm := range r.matches(mode, re) {
			plain, okP := r.get(mode, sm[0], variantPlain)
			wf, okW := r.get(mode, sm[0], variantWorkflow)
			rows = append(rows, []string{modeLabels[mode], sm[1], cell(plain, okP), cell(wf, okW), ratioCell(wf, okW, plain, okP)})
		}
	}
	if len(rows) == 0 {
		return
	}
	r.printf("## Workflows\n\n")
	r.table([]string{"setup", "work", "plain tasks", "workflow", "workflow / plain"}, rows, 2)
}

// spoolOnly renders the Spool rows whose names start with prefix, one
// column per setup.
func (r *report) spoolOnly(title, prefix, first string) { r.byMode(title, prefix, first, "spool") }

// spoolOnlyRaw is spoolOnly for raw rows.
func (r *report) spoolOnlyRaw(title, prefix, first string) { r.byMode(title, prefix, first, "raw") }

func (r *report) byMode(title, prefix, first, variant string) {
	var names []string
	var modes []string
	for _, mode := range r.modes() {
		for _, m := range r.f.Modes {
			if m.Name != mode {
				continue
			}
			for _, row := range m.Rows {
				if strings.HasPrefix(row.Row, prefix) {
					if !slices.Contains(names, row.Row) {
						names = append(names, row.Row)
					}
					if !slices.Contains(modes, mode) {
						modes = append(modes, mode)
					}
				}
			}
		}
	}
	if len(names) == 0 {
		return
	}
	head := []string{first}
	for _, m := range modes {
		head = append(head, modeLabels[m])
	}
	var rows [][]string
	for _, name := range names {
		row := []string{strings.TrimPrefix(name, prefix)}
		for _, m := range modes {
			row = append(row, r.cellOf(m, name, variant))
		}
		rows = append(rows, row)
	}
	r.printf("## %s\n\n", title)
	r.table(head, rows)
}

// others renders every row no table above showed, under its full name.
func (r *report) others() {
	var rows [][]string
	for _, m := range r.f.Modes {
		for _, row := range m.Rows {
			if r.used[m.Name+"\x00"+row.Row] {
				continue
			}
			var vs []string
			for _, k := range sortedKeys(row.Values) {
				vs = append(vs, k+" "+fmtNum(row.Values[k].Median))
			}
			rows = append(rows, []string{m.Name, row.Row, strings.Join(vs, ", ")})
		}
	}
	if len(rows) == 0 {
		return
	}
	r.printf("## Other figures\n\n")
	r.table([]string{"setup", "figure", "by variant"}, rows, 3)
}

func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}
