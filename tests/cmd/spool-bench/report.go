package main

import (
	"bytes"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

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

// writeReport renders the run's report, prints it and, unless cfg.out is
// empty, writes it to cfg.out (keeping the hand-written notes) and its
// figures beside it as JSON.
func writeReport(cfg config, r *results, wall time.Duration) error {
	f := r.snapshot(cfg, wall)
	out := renderReport(f)
	os.Stdout.Write(out)
	if cfg.out == "" {
		return nil
	}
	if err := f.write(sidecarPath(cfg.out)); err != nil {
		return err
	}
	return writeKeepingNotes(cfg.out, out)
}

// renderFile writes the report of the figures in the JSON file path to
// out, keeping its notes: -render.
func renderFile(path, out string) error {
	f, err := readFigures(path)
	if err != nil {
		return err
	}
	if out == "" {
		_, err := os.Stdout.Write(renderReport(f))
		return err
	}
	return writeKeepingNotes(out, renderReport(f))
}

// notesMarker starts the hand-written part of BENCHMARKS.md, which a new
// run keeps.
const notesMarker = "<!-- notes: kept by spool-bench -->"

func writeKeepingNotes(path string, table []byte) error {
	out := table
	if old, err := os.ReadFile(path); err == nil {
		if i := bytes.Index(old, []byte(notesMarker)); i >= 0 {
			out = append(append(bytes.Clone(table), '\n'), old[i:]...)
		}
	}
	if err := os.WriteFile(path, out, 0o644); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}

// report renders figures into Markdown. Every lookup marks its row as
// shown, and rows no table showed end in a last table under their full
// names, so a new scenario's rows appear before the report learns them.
type report struct {
	f    *figures
	vals map[string]median
	used map[string]bool
	b    strings.Builder
}

func newReport(f *figures) *report {
	r := &report{f: f, vals: map[string]median{}, used: map[string]bool{}}
	for _, m := range f.Modes {
		for _, row := range m.Rows {
			for variant, v := range row.Values {
				r.vals[m.Name+"\x00"+row.Row+"\x00"+variant] = v
			}
		}
	}
	return r
}

// get returns a median and whether the run has it, and marks the row shown.
func (r *report) get(mode, row, variant string) (float64, bool) {
	r.used[mode+"\x00"+row] = true
	v, ok := r.vals[mode+"\x00"+row+"\x00"+variant]
	return v.Median, ok && v.Runs > 0
}

// matches returns the submatches of the rows of mode that re matches.
func (r *report) matches(mode string, re *regexp.Regexp) [][]string {
	var out [][]string
	for _, m := range r.f.Modes {
		if m.Name != mode {
			continue
		}
		for _, row := range m.Rows {
			if sm := re.FindStringSubmatch(row.Row); sm != nil {
				out = append(out, sm)
			}
		}
	}
	return out
}

func (r *report) printf(format string, a ...any) { fmt.Fprintf(&r.b, format, a...) }

// table writes a Markdown table: the first left columns left-aligned (at
// least one), the others right-aligned.
func (r *report) table(head []string, rows [][]string, left ...int) {
	if len(rows) == 0 {
		return
	}
	l := 1
	if len(left) > 0 {
		l = left[0]
	}
	r.printf("| %s |\n|%s%s\n", strings.Join(head, " | "), strings.Repeat("---|", l), strings.Repeat("---:|", len(head)-l))
	for _, row := range rows {
		r.printf("| %s |\n", strings.Join(row, " | "))
	}
	r.printf("\n")
}

// modes are the single-server and cluster modes in the order of the run,
// with their short labels.
var modeLabels = map[string]string{
	"default sync":             "R1",
	"SyncAlways":               "R1 always",
	"cluster R3, default sync": "R3",
	"cluster R3, SyncAlways":   "R3 always",
}

func (r *report) modes() []string {
	var out []string
	for _, m := range r.f.Modes {
		if _, ok := modeLabels[m.Name]; ok {
			out = append(out, m.Name)
		}
	}
	return out
}

func renderReport(f *figures) []byte {
	r := newReport(f)
	targets := r.targetRows()
	r.printf("# Benchmarks\n\n")
	r.summary(targets)
	r.printf("## Targets\n\n")
	r.table([]string{"target", "verdict", "measured", "from"}, targets, 2)
	r.method()
	r.processing()
	r.enqueue()
	r.pickup()
	r.spoolOnly("Many types", "pickup by type, 8 slots, ", "worker serving (Spool)")
	r.shares()
	r.flowControl()
	r.spoolOnly("Services side by side", "isolation: ", "figure (Spool)")
	r.spoolOnly("Fairness of keys", "fairness: ", "figure (Spool)")
	r.backlog()
	r.workflows()
	r.peers()
	r.leaderChange()
	r.partitions()
	r.spoolOnlyRaw("Cross-check with `nats bench`", "cross-check: nats bench ", "msgs/s (raw JetStream)")
	r.others()
	return []byte(strings.TrimRight(r.b.String(), "\n") + "\n")
}

// summary is the three lines at the top: the run, the verdicts, the
// headline figure.
func (r *report) summary(targets [][]string) {
	f := r.f
	runs := fmt.Sprintf("medians of %d runs", f.Runs)
	if f.Runs == 1 {
		runs = "one run"
	}
	r.printf("`make bench` (`go run ./tests/cmd/spool-bench`) of %s, %s: %s on %s, %d cores (%s/%s), %s, nats-server %s, nats.go %s.\n\n",
		f.Written.Format("2006-01-02 15:04 MST"), time.Duration(f.WallSeconds*float64(time.Second)),
		runs, f.Machine.CPU, f.Machine.Cores, f.Machine.OS, f.Machine.Arch, f.Machine.Go, f.Machine.NATSServer, f.Machine.NATSGo)
	verdicts := map[string]int{}
	for _, t := range targets {
		verdicts[t[1]]++
	}
	r.printf("Targets: %d met, %d not met, %d not measured in this run (below).\n\n",
		verdicts[verdictMet], verdicts[verdictNotMet], verdicts[verdictNone])
	row, ok := r.procRow("default sync", 100, "")
	sp, okS := r.get("default sync", row, "spool")
	floor, okF := r.get("default sync", row, "raw-results")
	raw, okR := r.get("default sync", row, "raw")
	if ok && okS && okF && okR {
		r.printf("Processing, default sync, concurrency 100, no-op handler: Spool %s tasks/s, %s× a minimal nats.go consumer that stores each result before its ack (raw + results) and %s× raw JetStream that stores none.\n\n",
			fmtNum(sp), fmtRatio(sp/floor), fmtRatio(sp/raw))
		return
	}
	r.printf("The processing figures at concurrency 100 are not in this run.\n\n")
}

// fmtNum prints a figure with thousands separators from 1,000 on and
// three significant digits below.
func fmtNum(v float64) string {
	switch {
	case v == 0:
		return "0"
	case v >= 1000 || v <= -1000:
		s := fmt.Sprintf("%.0f", v)
		neg := strings.HasPrefix(s, "-")
		s = strings.TrimPrefix(s, "-")
		var b strings.Builder
		for i, c := range s {
			if i > 0 && (len(s)-i)%3 == 0 {
				b.WriteByte(',')
			}
			b.WriteRune(c)
		}
		if neg {
			return "-" + b.String()
		}
		return b.String()
	case v >= 100:
		return fmt.Sprintf("%.0f", v)
	case v >= 10:
		return fmt.Sprintf("%.1f", v)
	default:
		return fmt.Sprintf("%.2f", v)
	}
}

// fmtRatio prints a ratio with two decimals, or two significant digits
// below 0.1 (Spool's pickup is thousands of times shorter than asynq's
// default polling: 0.00 would say nothing).
func fmtRatio(v float64) string {
	if v != 0 && v < 0.1 {
		return fmt.Sprintf("%.2g", v)
	}
	return fmt.Sprintf("%.2f", v)
}

// cell prints a figure, or nothing when the run lacks it.
func cell(v float64, ok bool) string {
	if !ok {
		return ""
	}
	return fmtNum(v)
}

// ratioCell prints a / b, or nothing when either is missing.
func ratioCell(a float64, aok bool, b float64, bok bool) string {
	if !aok || !bok || b == 0 {
		return ""
	}
	return fmtRatio(a / b)
}

// method is the short account of how each figure is made.
func (r *report) method() {
	c := r.f.Counts
	n := func(i int) string {
		if i < 1000 {
			return strconv.Itoa(i)
		}
		return fmtNum(float64(i))
	}
	pull := "priority"
	if c.LimitsByType {
		pull = "type"
	}
	r.printf(`## Method

- **Setups.** R1: one nats-server child process, file storage in a temporary directory, the topology of `+"`streams.Provision`"+`; R3: three nats-server children on the same cores, every stream and bucket R3, their CPU summed. Default sync flushes to disk every 2 minutes; *always* is `+"`sync_interval: always`"+` (every write fsynced before it is acknowledged). Raw JetStream and Spool run back to back on the same server in every run.
- **Meters.** Throughput is tasks over the measured window. CPU per task is user + system time over the window divided by the tasks: the consumer child's (getrusage), the server's (/proc/<pid>/stat) and, for enqueue, the producer's. Writes per task are the consumer's write system calls.
- **Processing.** %s tasks queued, a consumer child takes %s (%s with always) with a no-op handler at concurrency c. *raw*: nats.go `+"`Consume`"+` with its defaults and `+"`Ack`"+`, storing nothing. *raw, bounded*: the same with `+"`PullMaxMessages(c)`"+`. *raw + results*: raw that writes a 70-byte result document to `+"`spool_results`"+` with `+"`PublishAsync`"+` and acks each task once its PubAck is in. *raw + Spool's writes*: raw + results with Spool's duty: its started event, its document written if the key has none, its completed event. *raw, acks confirmed* (always only): `+"`DoubleAck`"+` from c goroutines. *Spool*: a `+"`consumer.Worker`"+` with c slots storing each completed result before the ack; *events off* with `+"`WithEvents(false)`"+`, *state written* with the processing state written as every attempt starts, *discarded* with every result discarded.
- **Enqueue.** Single: %s sequential publishes waiting for the ack. Streaming: %s tasks with 4,096 in flight, raw `+"`PublishMsgAsync`"+` without a header and with the `+"`Nats-Msg-Id`"+` Spool sends (dedup), Spool `+"`EnqueueAsync`"+`, also from a client without enqueued events. Batches: %s tasks in batches of %s, each batch waited for, raw against `+"`EnqueueBatch`"+`. 128-byte payloads, a fresh stream per variant.
- **Pickup.** An idle consumer, %s tasks published one at a time at %s/s; stream timestamp to handler start (raw: a waiting `+"`Fetch(1)`"+`).
- **Shares.** %s tasks in each priority, %s slots, boost off: the share of the first %s starts per priority against the weights; raw round-robins the five consumers (20%% each).
- **Flow control.** Workers pull by %s; %s tasks of one type with a rule on it, a worker of 100 slots. A hand-back returns a pulled task to the stream because its limit is full; rate reached is tasks/s over the rate.
- **Backlog.** %s drains of %s tasks at concurrency 100, each after a top-up to the backlog; RSS is the consumer's peak.
- **Workflows.** A worker of 100 slots in the harness: %s chains of 10 steps against 10 plain tasks each enqueued once the last completed, and a group of %s with a callback against as many plain tasks.
`, n(c.Queued), n(c.ProcessN), n(c.ProcessNAlw), n(c.LatencyN), n(c.BatchN), n(c.BatchN), n(c.BatchSize),
		n(c.PickupN), n(c.PickupRate), n(c.SharesPer), n(c.SharesSlots), n(c.SharesWin), pull, n(c.LimitsN),
		n(c.BacklogReps), n(c.BacklogN), n(c.WfChains), n(c.WfGroup))
	if c.Cluster {
		r.printf("- **Cluster.** The same scenarios on R3 with smaller counts, the clients connected to all three servers. Leader change: a quarter into a drain at concurrency 100 the task stream's leader steps down or its node is killed (SIGKILL, restarted after); the figure is the longest time between two acks from then on, seen on `$JS.ACK.<stream>.>` from a surviving node. Partitions: K task partitions, their leaders spread over the servers, a worker pinned to each partition.\n")
	}
	r.printf("%s\n", peerMethod(r.f.Peers))
}
