package checker_test

import (
	"bytes"
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
