package checker_test

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"github.com/spoolq/spool/tests/checker"
)

func TestSpanChecks(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	var log bytes.Buffer
	log.Write(checker.FormatSpanStart("a", 1, "w1", "lim", "k 1", at(0)))
	log.Write(checker.FormatSpanStart("b", 1, "w2", "lim", "k 1", at(5)))
	log.Write(checker.FormatSpanEnd("a", 1, "w1", at(10)))
	log.Write(checker.FormatSpanStart("c", 1, "w1", "lim", "k2", at(10))) // starts as a ends: no overlap of 3
	log.Write(checker.FormatSpanStart("d", 1, "w3", "lim", "k2", at(12))) // never ends: w3 killed at 20
	log.Write(checker.FormatSpanEnd("b", 1, "w2", at(30)))
	log.Write(checker.FormatSpanEnd("c", 1, "w1", at(30)))
	log.WriteString("S torn 1 w")
	spans, torn, err := checker.ReadSpanLog(&log)
	if err != nil || torn != 1 || len(spans) != 4 {
		t.Fatalf("read %d spans, %d torn, %v", len(spans), torn, err)
	}
	if spans[0].Key != "k 1" || !spans[3].End.IsZero() {
		t.Errorf("spans %+v", spans)
	}
	killed := map[string]time.Time{"w3": at(20)}
	all, err := checker.MaxConcurrent(spans, killed, func(s checker.Span) string { return s.Type })
	if err != nil {
		t.Fatal(err)
	}
	if o := all["lim"]; o.Max != 3 || !o.At.Equal(at(12)) {
		t.Errorf("type overlap %+v, want 3 at 12ms", o)
	}
	perKey, err := checker.MaxConcurrent(spans, killed, func(s checker.Span) string { return s.Key })
	if err != nil {
		t.Fatal(err)
	}
	if perKey["k 1"].Max != 2 || perKey["k2"].Max != 2 {
		t.Errorf("per-key overlaps %+v", perKey)
	}
	if _, err := checker.MaxConcurrent(spans, nil, func(s checker.Span) string { return s.Type }); err == nil {
		t.Error("an unfinished run of a worker not killed went unnoticed")
	}
	most, rate := checker.MaxInWindow([]time.Time{at(0), at(100), at(200), at(999), at(1000), at(1999)}, time.Second)
	if most != 4 {
		t.Errorf("most in a second %d, want 4 (0, 100, 200, 999)", most)
	}
	if rate < 2.5 || rate > 2.51 {
		t.Errorf("rate %.3f, want 5 starts in 1.999s", rate)
	}
}

func TestKeyOrder(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	run := func(id, key string, attempt, start, end int) checker.Span {
		s := checker.Span{ID: id, Attempt: attempt, Key: key, Start: at(start)}
		if end >= 0 {
			s.End = at(end)
		}
		return s
	}
	index := func(s checker.Span) int { return int(s.ID[1] - '0') }
	key := func(s checker.Span) string { return s.Key }
	for _, tc := range []struct {
		name  string
		spans []checker.Span
		want  []string // ids of the runs that breach
	}{
		{"in order", []checker.Span{run("t0", "k", 1, 0, 10), run("t1", "k", 1, 10, 20), run("t2", "k", 1, 25, 30)}, nil},
		{"keys apart", []checker.Span{run("t0", "a", 1, 0, 10), run("t1", "b", 1, 0, 10)}, nil},
		{"cut run holds the key", []checker.Span{run("t0", "k", 1, 0, -1), run("t0", "k", 2, 50, 60), run("t1", "k", 1, 60, 70)}, nil},
		{"redelivery after completion", []checker.Span{run("t0", "k", 1, 0, 10), run("t1", "k", 1, 10, 20), run("t0", "k", 2, 15, 18)}, nil},
		{"overtakes", []checker.Span{run("t0", "k", 1, 0, 10), run("t1", "k", 1, 5, 20)}, []string{"t1"}},
		{"after a cut run", []checker.Span{run("t0", "k", 1, 0, -1), run("t1", "k", 1, 20, 30), run("t0", "k", 2, 50, 60)}, []string{"t1"}},
		{"behind a later one", []checker.Span{run("t0", "k", 1, 0, 30), run("t1", "k", 1, 40, 50), run("t2", "k", 1, 20, 25)}, []string{"t2"}},
	} {
		var got []string
		for _, b := range checker.KeyOrder(tc.spans, key, index) {
			got = append(got, b.Run.ID)
		}
		if len(got) != len(tc.want) || len(got) > 0 && got[0] != tc.want[0] {
			t.Errorf("%s: breaches %v, want %v", tc.name, got, tc.want)
		}
	}
}

// The rate under backlog counts the starts from the first until fewer
// than a period's allowance of tasks waited (a task waits until its run
// that ended starts; a run cut by a kill counts as a start but not as the
// task's), per whole period and in all.
func TestRateUnderBacklog(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	var runs []checker.Span
	run := func(id string, ms int, ended bool) {
		s := checker.Span{ID: id, Start: at(ms)}
		if ended {
			s.End = at(ms + 1)
		}
		runs = append(runs, s)
	}
	// 8 tasks at 2 per second: a..f start 500ms apart from 0, g's first
	// run (at 1250) is cut by a kill and it runs again at 3500, h at 4000.
	for i, id := range []string{"a", "b", "c", "d", "e", "f"} {
		run(id, 500*i, true)
	}
	run("g", 1250, false)
	run("g", 3500, true)
	run("h", 4000, true)
	r := checker.RateUnderBacklog(runs, 8, 2, time.Second)
	// Fewer than 2 wait once the 7th task (g, at 3500) starts its
	// completing run: the backlog is [0, 3500).
	if !r.From.Equal(at(0)) || !r.To.Equal(at(3500)) {
		t.Fatalf("backlog from %s to %s, want 0 to 3500ms", r.From.Sub(t0), r.To.Sub(t0))
	}
	if r.Starts != 7 || fmt.Sprint(r.Windows) != "[2 3 2]" {
		t.Errorf("%d starts, windows %v; want 7, [2 3 2]", r.Starts, r.Windows)
	}
	if want := 7 / 7.0; r.Fraction != want {
		t.Errorf("fraction %v, want %v", r.Fraction, want)
	}
	if r := checker.RateUnderBacklog(runs, 8, 9, time.Second); !r.To.IsZero() || r.Starts != 0 {
		t.Errorf("a backlog below the limit measured %+v", r)
	}
}
