package main

import (
	"bytes"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/spoolq/spool/consumer"
	spool "github.com/spoolq/spool/shared"
)

// results collects every run's figure per sync mode, row and variant.
type results struct {
	modes  []string
	rows   map[string][]string // mode → row names in first-seen order
	vals   map[string][]float64
	peer   peerInfo   // the asynq run (peers scenario)
	bullmq bullmqInfo // the BullMQ run (peers scenario)
}

func newResults() *results {
	return &results{rows: map[string][]string{}, vals: map[string][]float64{}}
}

func (r *results) add(mode, row, variant string, v float64) {
	if !slices.Contains(r.rows[mode], row) {
		r.rows[mode] = append(r.rows[mode], row)
	}
	k := mode + "\x00" + row + "\x00" + variant
	r.vals[k] = append(r.vals[k], v)
}

// median returns the median of the runs of one figure and how many runs
// there were.
func (r *results) median(mode, row, variant string) (float64, int) {
	v := slices.Clone(r.vals[mode+"\x00"+row+"\x00"+variant])
	if len(v) == 0 {
		return 0, 0
	}
	slices.Sort(v)
	if len(v)%2 == 1 {
		return v[len(v)/2], len(v)
	}
	return (v[len(v)/2-1] + v[len(v)/2]) / 2, len(v)
}

func weightShare(p spool.Priority) float64 {
	w := consumer.DefaultWeights()
	var sum float64
	for _, x := range w {
		sum += x
	}
	return 100 * w[p] / sum
}

func cpuModel() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return "unknown"
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "unknown"
}

func fmtVal(v float64) string {
	switch {
	case v == 0:
		return "0"
	case v >= 1000:
		return fmt.Sprintf("%.0f", v)
	case v >= 10:
		return fmt.Sprintf("%.1f", v)
	default:
		return fmt.Sprintf("%.2f", v)
	}
}

// writeReport renders the tables and writes them to cfg.out (and stdout).
func writeReport(cfg config, r *results, wall time.Duration) error {
	var b bytes.Buffer
	fmt.Fprintf(&b, "# Benchmarks\n\n")
	fmt.Fprintf(&b, "Written by `make bench` (`go run ./tests/cmd/spool-bench`) on %s; the run took %s.\n\n",
		time.Now().UTC().Format("2006-01-02 15:04 MST"), wall.Round(time.Second))
	fmt.Fprintf(&b, "| machine | |\n|---|---|\n")
	fmt.Fprintf(&b, "| CPU | %s, %d cores (`nproc`), %s/%s |\n", cpuModel(), runtime.NumCPU(), runtime.GOOS, runtime.GOARCH)
	fmt.Fprintf(&b, "| Go | %s |\n| nats-server | %s (a child process of the harness) |\n| nats.go | %s |\n", runtime.Version(), server.VERSION, nats.Version)
	fmt.Fprintf(&b, "| storage | file, in a temporary directory; one server per sync mode, topology from `streams.Provision` with default settings (R1) |\n")
	fmt.Fprintf(&b, "| runs | every figure is the median of %d runs; raw and Spool run back to back in each run |\n\n", cfg.runs)
	b.WriteString(methodNotes(cfg))
	if cfg.cluster {
		b.WriteString(clusterNote())
	}
	b.WriteString(peerMethod(r))
	for _, mode := range r.modes {
		fmt.Fprintf(&b, "\n## %s\n\n", mode)
		// The raw columns this mode has, after "raw".
		var cols []rawColumn
		for _, c := range rawColumns {
			for _, row := range r.rows[mode] {
				if _, n := r.median(mode, row, c.variant); n > 0 {
					cols = append(cols, c)
					break
				}
			}
		}
		b.WriteString("| figure | raw JetStream |")
		for _, c := range cols {
			b.WriteString(" " + c.title + " |")
		}
		b.WriteString(" Spool | Spool / raw |\n|---|---:|" + strings.Repeat("---:|", len(cols)) + "---:|---:|\n")
		var wfRows []string
		for _, row := range r.rows[mode] {
			if r.peerOnly(mode, row) {
				continue // in the asynq table below
			}
			if strings.HasPrefix(row, "workflow:") {
				wfRows = append(wfRows, row)
				continue
			}
			raw, nr := r.median(mode, row, "raw")
			sp, ns := r.median(mode, row, "spool")
			rawCell := "" // a Spool-only row
			if nr > 0 {
				rawCell = fmtVal(raw)
			}
			var ratios []string
			if ns > 0 && raw != 0 {
				ratios = append(ratios, fmt.Sprintf("%.2f", sp/raw))
			}
			cells := ""
			for _, c := range cols {
				v, n := r.median(mode, row, c.variant)
				cell := ""
				if n > 0 {
					cell = fmtVal(v)
					if ns > 0 && v != 0 {
						ratios = append(ratios, fmt.Sprintf("%.2f of %s", sp/v, c.short))
					}
				}
				cells += " " + cell + " |"
			}
			ratio := strings.Join(ratios, "; ")
			if strings.HasPrefix(row, "shares:") {
				ratio = "" // a share is compared with its weight, not with raw
			}
			spCell := ""
			if ns > 0 {
				spCell = fmtVal(sp)
			}
			fmt.Fprintf(&b, "| %s | %s |%s %s | %s |\n", row, rawCell, cells, spCell, ratio)
		}
		if len(wfRows) > 0 {
			b.WriteString("\n| workflows | plain Spool tasks | workflow | workflow / plain |\n|---|---:|---:|---:|\n")
			for _, row := range wfRows {
				plain, _ := r.median(mode, row, variantPlain)
				wf, _ := r.median(mode, row, variantWorkflow)
				ratio := ""
				if plain != 0 {
					ratio = fmt.Sprintf("%.2f", wf/plain)
				}
				fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", strings.TrimPrefix(row, "workflow: "), fmtVal(plain), fmtVal(wf), ratio)
			}
		}
		b.WriteString(peerTable(r, mode))
	}
	b.WriteString(targetTable(cfg, r))
	os.Stdout.Write(b.Bytes())
	if cfg.out == "" {
		return nil
	}
	return writeKeepingNotes(cfg.out, b.Bytes())
}

// target is one row of the target table: Spool's figure of row over the
// variant's, at most (atMost) or at least bound.
type target struct {
	what, mode, row, variant string
	bound                    float64
	atMost                   bool
}

// targetTable renders the targets of the performance issue with a verdict
// each, from this run's medians.
func targetTable(cfg config, r *results) string {
	var ts []target
	proc := func(c int) string {
		return fmt.Sprintf("processing: %d queued, concurrency %d (tasks/s)", cfg.queued, c)
	}
	for _, c := range cfg.concs {
		switch c {
		case 10:
			ts = append(ts,
				target{"processing with results, concurrency 10, ≥ 0.8× raw + results (the floor)", "default sync", proc(c), "raw-results", 0.8, false},
				target{"results discarded, concurrency 10, ≥ 0.5× raw", "default sync", proc(c) + ", results discarded", "raw", 0.5, false},
				target{"processing, concurrency 10, ≥ 2× BullMQ", "default sync", proc(c), variantBullMQ, 2, false},
			)
		case 50:
			ts = append(ts,
				target{"processing, concurrency 50, ≥ 2× BullMQ", "default sync", proc(c), variantBullMQ, 2, false},
			)
		case 100:
			ts = append(ts,
				target{"processing with results, concurrency 100, ≥ 0.9× raw + results (the floor)", "default sync", proc(c), "raw-results", 0.9, false},
				target{"CPU per task (consumer + server), concurrency 100, ≤ 1.15× raw + results", "default sync", "CPU per task: consumer + server, concurrency 100 (µs)", "raw-results", 1.15, true},
				target{"results discarded, concurrency 100, ≥ 0.8× raw", "default sync", proc(c) + ", results discarded", "raw", 0.8, false},
			)
		}
		ts = append(ts, target{fmt.Sprintf("SyncAlways processing, concurrency %d, ≥ 0.9× raw + results", c), "SyncAlways", proc(c), "raw-results", 0.9, false})
	}
	pickupP99 := fmt.Sprintf("pickup at %d tasks/s: p99 (µs)", cfg.pickupRate)
	ts = append(ts,
		target{"streaming enqueue ≥ 0.8× raw PublishAsync", "default sync", "enqueue: streaming (tasks/s)", "raw", 0.8, false},
		target{"streaming enqueue ≥ 0.8× raw PublishAsync with Nats-Msg-Id", "default sync", "enqueue: streaming (tasks/s)", "raw+headers", 0.8, false},
		target{"streaming enqueue without enqueued events (WithEnqueuedEvents(false)) ≥ 0.8× raw PublishAsync", "default sync", "enqueue: streaming, no enqueued events (tasks/s)", "raw", 0.8, false},
		target{"SyncAlways streaming enqueue ≥ 0.8× raw PublishAsync", "SyncAlways", "enqueue: streaming (tasks/s)", "raw", 0.8, false},
		target{"pickup p99 ≤ 2× raw", "default sync", pickupP99, "raw", 2, true},
		target{"pickup p99 ≤ BullMQ's", "default sync", pickupP99, variantBullMQ, 1, true},
	)
	var b strings.Builder
	b.WriteString("\n## Targets\n\n| target | Spool / baseline | verdict |\n|---|---:|---|\n")
	for _, t := range ts {
		sp, ns := r.median(t.mode, t.row, "spool")
		base, nb := r.median(t.mode, t.row, t.variant)
		if ns == 0 || nb == 0 || base == 0 {
			fmt.Fprintf(&b, "| %s | | not measured in this run |\n", t.what)
			continue
		}
		v := sp / base
		verdict := "met"
		if (t.atMost && v > t.bound) || (!t.atMost && v < t.bound) {
			verdict = "not met"
		}
		fmt.Fprintf(&b, "| %s | %.2f | %s |\n", t.what, v, verdict)
	}
	return b.String()
}

// rawColumn is a raw variant shown beside "raw" (nats.go's defaults).
type rawColumn struct{ variant, title, short string }

var rawColumns = []rawColumn{
	{"raw+headers", "raw + Nats-Msg-Id", "raw+Nats-Msg-Id"},
	{"raw-bounded", "raw, bounded", "bounded"},
	{"raw-results", "raw + results", "raw+results"},
	{"raw-acksync", "raw, acks confirmed", "acks confirmed"},
}

// notesMarker starts the hand-written part of BENCHMARKS.md, which a new
// run keeps.
const notesMarker = "<!-- notes: kept by spool-bench -->"

func writeKeepingNotes(path string, table []byte) error {
	out := table
	if old, err := os.ReadFile(path); err == nil {
		if i := bytes.Index(old, []byte(notesMarker)); i >= 0 {
			out = append(append(out, '\n'), old[i:]...)
		}
	}
	if err := os.WriteFile(path, out, 0o644); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}

func methodNotes(c config) string {
	return fmt.Sprintf(`How each figure is made:

- **enqueue**: single task = %d sequential publishes waiting for the ack (raw `+"`js.Publish`"+`, Spool `+"`Client.Enqueue`"+`), 128-byte payload; batch = %d tasks in batches of %d with %d publishes in flight (raw `+"`PublishMsgAsync`"+` without headers, raw with the header the contract needs on an immediate task, `+"`Nats-Msg-Id`"+` (dedup; Spool's client sends the same), Spool `+"`EnqueueBatch`"+`), waiting for every ack; streaming = the same tasks through `+"`EnqueueAsync`"+`, and again from a client made `+"`WithEnqueuedEvents(false)`"+` (the row "no enqueued events" repeats the streaming row's raw figures). Each variant starts on a freshly created stream.
- **processing**: the normal priority holds %d queued tasks; the consumer (a child process) processes %d of them (%d with SyncAlways) with a no-op handler. Raw = `+"`Consume`"+` with nats.go's defaults (pulls of up to 500, the next once 250 are handled, heartbeats) + `+"`Ack`"+` in the callback, what a user writes first; raw, bounded = the same with `+"`PullMaxMessages(concurrency)`"+`, as many tasks in flight as the worker has slots; raw + results = the same defaults, the callback writing a small result document to the task's key in `+"`spool_results`"+` with `+"`PublishAsync`"+` and a goroutine acking each task once its result's PubAck is in, what a user writes first when results must be stored before the ack; Spool = a `+"`consumer.Worker`"+` with that many slots, writing the result states to `+"`spool_results`"+` (completed stored before the ack).
- **pickup**: an idle consumer; %d tasks published one at a time at %d tasks/s; stream timestamp → handler start (raw: delivery of a waiting `+"`Fetch(1)`"+`).
- **shares**: %d tasks queued in each of the five priorities, %d slots, boost off; the share of the first %d tasks started per priority, against the configured weights (raw round-robins the five consumers). The longest wait of idle is the longest time without an idle task starting.
- **backlog**: %d drains of %d tasks at concurrency %d, each after a top-up to %d and then to %d queued tasks; throughput over all drains; RSS is the consumer children's peak (VmHWM).
- **workflows**: a worker of 100 slots with a no-op handler in the harness's process. Chain: the median of %d chains of 10 steps (each receiving the previous result), submit to final state, against 10 plain tasks each enqueued once the previous completed (`+"`Enqueue`"+` + `+"`Wait`"+`). Group: %d members and one callback taking all their results, submit to final state, against %d plain tasks from `+"`EnqueueBatch`"+` until the stream is empty.
- **CPU per task**: user+sys of the producer (this process, getrusage), the consumer child (getrusage) and the server child (/proc/<pid>/stat) over the measured window, divided by the tasks.
`, c.latencyN, c.batchN, c.batchSize, 4096, c.queued, c.processN, c.processNAlw, c.pickupN, c.pickupRate,
		c.sharesPer, c.sharesSlots, c.sharesWin, c.backlogReps, c.backlogN, c.backlogConc, c.backlogLo, c.backlogHi,
		c.wfChains, c.wfGroup, c.wfGroup)
}
