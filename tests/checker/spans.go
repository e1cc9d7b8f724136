package checker

import (
	"bufio"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"time"
)

// The span log records when each handler run started and ended, for the
// flow-control checks: one line per event, appended with a single write
// like the execution log, "S <task-id> <attempt> <worker> <unix-ns> <type>
// <quoted key>" at the start and "E <task-id> <attempt> <worker> <unix-ns>"
// at the end.

// Span is one handler run.
type Span struct {
	ID      string
	Attempt int
	Worker  string
	Type    string
	Key     string
	Start   time.Time
	// End is zero when the run never ended (its worker was killed).
	End time.Time
}

// FormatSpanStart returns the start line of a run.
func FormatSpanStart(id string, attempt int, worker, typ, key string, at time.Time) []byte {
	return fmt.Appendf(nil, "S %s %d %s %d %s %s\n", id, attempt, worker, at.UnixNano(), typ, strconv.Quote(key))
}

// FormatSpanEnd returns the end line of a run.
func FormatSpanEnd(id string, attempt int, worker string, at time.Time) []byte {
	return fmt.Appendf(nil, "E %s %d %s %d\n", id, attempt, worker, at.UnixNano())
}

// ReadSpanLog returns the runs of a span log; torn counts the lines a kill
// cut short.
func ReadSpanLog(r io.Reader) (spans []Span, torn int, err error) {
	type runKey struct {
		id, worker string
		attempt    int
	}
	open := map[runKey]int{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 5 {
			torn++
			continue
		}
		attempt, err1 := strconv.Atoi(f[2])
		ns, err2 := strconv.ParseInt(f[4], 10, 64)
		if err1 != nil || err2 != nil {
			torn++
			continue
		}
		k := runKey{f[1], f[3], attempt}
		switch {
		case f[0] == "S" && len(f) >= 7:
			key, err := strconv.Unquote(strings.Join(f[6:], " "))
			if err != nil {
				torn++
				continue
			}
			open[k] = len(spans)
			spans = append(spans, Span{ID: f[1], Attempt: attempt, Worker: f[3], Type: f[5], Key: key, Start: time.Unix(0, ns)})
		case f[0] == "E" && len(f) == 5:
			if i, ok := open[k]; ok {
				spans[i].End = time.Unix(0, ns)
				delete(open, k)
			}
		default:
			torn++
		}
	}
	if err := sc.Err(); err != nil {
		return spans, torn, fmt.Errorf("reading span log: %w", err)
	}
	return spans, torn, nil
}

// Overlap is the most runs of one group at once, and when.
type Overlap struct {
	Group string
	Max   int
	At    time.Time
}

// MaxConcurrent returns, for each group of spans (group names it; "" leaves
// a span out), the most that ran at the same moment. A run that never
// ended counts until its worker's entry in killedAt (the moment the test
// saw the process gone); it is an error when the worker was not killed.
func MaxConcurrent(spans []Span, killedAt map[string]time.Time, group func(Span) string) (map[string]Overlap, error) {
	type event struct {
		at    time.Time
		delta int
	}
	byGroup := map[string][]event{}
	for _, s := range spans {
		g := group(s)
		if g == "" {
			continue
		}
		end := s.End
		if end.IsZero() {
			k, ok := killedAt[s.Worker]
			if !ok {
				return nil, fmt.Errorf("run %s attempt %d on worker %s never ended, and the worker was not killed", s.ID, s.Attempt, s.Worker)
			}
			end = k
		}
		byGroup[g] = append(byGroup[g], event{s.Start, +1}, event{end, -1})
	}
	out := make(map[string]Overlap, len(byGroup))
	for g, evs := range byGroup {
		// At equal times an end comes first: a slot released and taken in
		// the same nanosecond is not an overlap.
		sort.Slice(evs, func(i, j int) bool {
			if evs[i].at.Equal(evs[j].at) {
				return evs[i].delta < evs[j].delta
			}
			return evs[i].at.Before(evs[j].at)
		})
		o := Overlap{Group: g}
		n := 0
		for _, e := range evs {
			n += e.delta
			if n > o.Max {
				o.Max, o.At = n, e.at
			}
		}
		out[g] = o
	}
	return out, nil
}

// MaxInWindow returns the most starts within any window of length w (a
// half-open interval [t, t+w)), and the achieved rate: starts per second
// from the first to the last.
func MaxInWindow(starts []time.Time, w time.Duration) (most int, rate float64) {
	s := append([]time.Time(nil), starts...)
	sort.Slice(s, func(i, j int) bool { return s[i].Before(s[j]) })
	j := 0
	for i := range s {
		for j < len(s) && s[j].Before(s[i].Add(w)) {
			j++
		}
		most = max(most, j-i)
	}
	if len(s) > 1 {
		if span := s[len(s)-1].Sub(s[0]); span > 0 {
			rate = float64(len(s)-1) / span.Seconds()
		}
	}
	return most, rate
}

// OrderBreach is a run of a task that started before an earlier task of
// its key (by enqueue index) had completed.
type OrderBreach struct {
	Key string
	// Run is the run that started too early; Earlier is the task that
	// had not completed, First its first completed run (zero: never).
	Run     Span
	Earlier string
	First   Span
}

// KeyOrder checks per-key ordering: within each key (key names it; ""
// leaves a span out), no run of a task starts before every task enqueued
// before it (index gives the enqueue index) has completed, a task being
// completed at the end of its first run that ended (a run cut by a kill
// did not complete). A run of a task again after it completed (a
// redelivery) is not a breach. It returns the breaches, at most one per
// run.
func KeyOrder(spans []Span, key func(Span) string, index func(Span) int) []OrderBreach {
	type task struct {
		id    string
		index int
		done  Span // first completed run
		runs  []Span
	}
	byKey := map[string]map[string]*task{}
	for _, s := range spans {
		k := key(s)
		if k == "" {
			continue
		}
		tasks := byKey[k]
		if tasks == nil {
			tasks = map[string]*task{}
			byKey[k] = tasks
		}
		t := tasks[s.ID]
		if t == nil {
			t = &task{id: s.ID, index: index(s)}
			tasks[s.ID] = t
		}
		t.runs = append(t.runs, s)
		if !s.End.IsZero() && (t.done.End.IsZero() || s.End.Before(t.done.End)) {
			t.done = s
		}
	}
	var out []OrderBreach
	for k, tasks := range byKey {
		ordered := make([]*task, 0, len(tasks))
		for _, t := range tasks {
			ordered = append(ordered, t)
		}
		sort.Slice(ordered, func(i, j int) bool { return ordered[i].index < ordered[j].index })
		// latest is the earlier task that completed last (or never).
		var latest *task
		for _, t := range ordered {
			if latest != nil {
				for _, r := range t.runs {
					if latest.done.End.IsZero() || r.Start.Before(latest.done.End) {
						out = append(out, OrderBreach{Key: k, Run: r, Earlier: latest.id, First: latest.done})
						break
					}
				}
			}
			if latest == nil || !latest.done.End.IsZero() && (t.done.End.IsZero() || t.done.End.After(latest.done.End)) {
				latest = t
			}
		}
	}
	return out
}

// BacklogRate is the rate a backlog of rate-limited tasks reached (see
// RateUnderBacklog).
type BacklogRate struct {
	// From is the first start; To the moment the backlog fell below one
	// period's allowance (zero when it never held that much).
	From, To time.Time
	// Starts counts the runs started in [From, To) (a run again of a
	// task, and a run cut by a kill, took a start too).
	Starts int
	// Fraction is Starts over what the limit allows in [From, To).
	Fraction float64
	// Windows are the starts in each whole period from From on, the
	// last one ending by To.
	Windows []int
}

// RateUnderBacklog measures the rate that a backlog of tasks limited to
// limit starts per period reached while there was backlog: runs are every
// run of the tasks (tasks of them, all enqueued before the first start),
// and the span goes from the first start until fewer than limit tasks were
// waiting. A task waits
// until the start of its first run that ended (a run cut by a kill did
// not; its task still waits for its redelivery), so the span ends when at
// most limit−1 tasks had not yet started the run that completed them:
// until then, a whole period's allowance of tasks was there to start
// (some held by a killed worker until their redelivery, which the rate
// pays for).
func RateUnderBacklog(runs []Span, tasks, limit int, period time.Duration) BacklogRate {
	var r BacklogRate
	if len(runs) == 0 || limit < 1 || tasks < limit {
		return r
	}
	starts := make([]time.Time, 0, len(runs))
	done := map[string]time.Time{}
	for _, s := range runs {
		starts = append(starts, s.Start)
		if s.End.IsZero() {
			continue
		}
		if d, ok := done[s.ID]; !ok || s.Start.Before(d) {
			done[s.ID] = s.Start
		}
	}
	sort.Slice(starts, func(i, j int) bool { return starts[i].Before(starts[j]) })
	r.From = starts[0]
	left := make([]time.Time, 0, len(done))
	for _, d := range done {
		left = append(left, d)
	}
	sort.Slice(left, func(i, j int) bool { return left[i].Before(left[j]) })
	// The backlog falls below limit when the (tasks−limit+1)-th task
	// starts its completing run; tasks that never completed keep it up.
	if i := tasks - limit; i < len(left) {
		r.To = left[i]
	} else {
		r.To = starts[len(starts)-1]
	}
	if !r.To.After(r.From) {
		r.To = time.Time{}
		return r
	}
	r.Windows = make([]int, r.To.Sub(r.From)/period)
	for _, s := range starts {
		if !s.Before(r.To) {
			break
		}
		r.Starts++
		if k := int(s.Sub(r.From) / period); k < len(r.Windows) {
			r.Windows[k]++
		}
	}
	allowed := float64(limit) * r.To.Sub(r.From).Seconds() / period.Seconds()
	r.Fraction = float64(r.Starts) / allowed
	return r
}
