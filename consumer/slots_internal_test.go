package consumer

import (
	"fmt"
	"io"
	"log/slog"
	"testing"
	"testing/synctest"
	"time"

	spool "github.com/spoolq/spool/shared"
)

// check verifies the invariants documented on slots.
func (s *slots) check() error {
	busy := 0
	for p, b := range s.prio {
		busy += b
		if b < 0 {
			return fmt.Errorf("priority %d: busy %d", p, b)
		}
	}
	switch {
	case s.busy < 0 || s.fetching < 0 || s.polling < 0 || s.queued < 0:
		return fmt.Errorf("negative: busy %d, fetching %d, polling %d, queued %d", s.busy, s.fetching, s.polling, s.queued)
	case s.ahead < 0 || s.ahead > maxAhead(s.max):
		return fmt.Errorf("ahead %d outside [0, %d]", s.ahead, maxAhead(s.max))
	case s.queued > 0 && s.busy < s.size:
		return fmt.Errorf("%d queued with %d of %d slots busy", s.queued, s.busy, s.size)
	case busy != s.busy:
		return fmt.Errorf("busy %d, priorities' busy %d", s.busy, busy)
	case s.busy+s.queued+s.fetching+s.polling > s.max+maxAhead(s.max):
		return fmt.Errorf("busy %d + queued %d + fetching %d + polling %d > max %d + %d ahead", s.busy, s.queued, s.fetching, s.polling, s.max, maxAhead(s.max))
	case s.size < s.min || s.size > s.max || s.busy > s.size:
		return fmt.Errorf("size %d outside [max(min %d, busy %d), max %d]", s.size, s.min, s.busy, s.max)
	case s.highWater < s.busy:
		return fmt.Errorf("high water %d below busy %d", s.highWater, s.busy)
	}
	return nil
}

func mustCheck(t *testing.T, s *slots, step string) {
	t.Helper()
	if err := s.check(); err != nil {
		t.Fatalf("after %s: %v (%+v)", step, err, *s)
	}
}

// A no-wait fetch round and a long-poll, through arrival, attempts and
// the ends of the requests.
func TestSlotsArithmetic(t *testing.T) {
	t.Parallel()
	s := newSlots(2, 4)
	mustCheck(t, &s, "new")
	if s.free() != 2 || s.spare() != 4 || s.idle() != 2 {
		t.Fatalf("new: free %d spare %d idle %d", s.free(), s.spare(), s.idle())
	}

	// A fetch of 2 high tasks and a long-poll of low.
	s.reserve(2, false)
	s.reserve(1, true)
	mustCheck(t, &s, "reserve")
	if s.fetching != 2 || s.polling != 1 || s.spare() != 1 || s.free() != 2 {
		t.Fatalf("reserved: %+v, free %d spare %d", s, s.free(), s.spare())
	}

	// One high task comes, the fetch ends one short.
	s.arrive(false)
	s.take(spool.High)
	s.end(false, 1)
	mustCheck(t, &s, "fetch")
	if s.busy != 1 || s.fetching != 0 || s.idle() != 1 {
		t.Fatalf("after the fetch: %+v", s)
	}

	// The long-poll brings a task while the pool's other slot is busy too:
	// the pool grows.
	s.reserve(1, false)
	s.arrive(false)
	s.take(spool.High)
	s.end(false, 0)
	s.arrive(true)
	s.take(spool.Low)
	s.end(true, 0)
	mustCheck(t, &s, "long-poll")
	if s.busy != 3 || s.size != 3 || s.scaleUps != 1 || s.highWater != 3 || s.polling != 0 {
		t.Fatalf("after the long-poll: %+v", s)
	}

	if fetching := s.release(spool.Low); fetching {
		t.Fatal("release reports fetches in flight")
	}
	s.reserve(1, false)
	if fetching := s.release(spool.High); !fetching {
		t.Fatal("release misses the fetch in flight")
	}
	s.end(false, 1)
	mustCheck(t, &s, "release")
	if s.busy != 1 || s.prio[spool.High] != 1 || s.prio[spool.Low] != 0 {
		t.Fatalf("after releases: %+v", s)
	}
}

func TestSlotsGrow(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name              string
		busy, fetching    int
		backlog           uint64
		fill              float64
		wantSize, wantUps int
	}{
		{"idle pool", 0, 0, 100, 0.75, 2, 0},
		{"full pool, no backlog", 2, 0, 0, 0.75, 2, 0},
		{"full pool, backlog: one slot at a time", 2, 0, 100, 0.75, 3, 1},
		{"full with fetches, backlog", 1, 1, 3, 0.75, 3, 1},
		{"no fill needed: up to the backlog", 2, 0, 3, 0, 5, 3},
		{"no fill needed: up to max", 2, 0, 100, 0, 8, 6},
		{"under fill", 1, 0, 100, 0.75, 2, 0},
	}
	for _, c := range cases {
		s := newSlots(2, 8)
		for range c.busy {
			s.take(spool.Normal)
		}
		if c.fetching > 0 {
			s.reserve(c.fetching, false)
		}
		s.grow(c.backlog, c.fill)
		mustCheck(t, &s, c.name)
		if s.size != c.wantSize || s.scaleUps != uint64(c.wantUps) {
			t.Errorf("%s: size %d (%d ups), want %d (%d)", c.name, s.size, s.scaleUps, c.wantSize, c.wantUps)
		}
	}
}

// The autoscaler's idle shrink, on synctest's clock: the pool goes down
// to the most slots busy during each ScaleDownIdle window, never below the
// busy slots nor MinConcurrency, and not before a window has passed.
func TestScaleDownAfterIdle(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		const idle = 30 * time.Second
		w := &dispatcher{
			o:     &config{MinConcurrency: 1, MaxConcurrency: 8, ScaleDownIdle: idle},
			log:   slog.New(slog.NewTextHandler(io.Discard, nil)),
			slots: newSlots(1, 8),
			lanes: make([]lane, numPriorities),
		}
		normal := laneOf(0, spool.Normal)
		w.slots.startWindow(time.Now())
		w.mu.Lock()
		w.slots.grow(100, 0) // a backlog: the pool grows to max
		for range 5 {
			w.admitLocked(normal, false, nil)
			w.attempts.Done()
		}
		w.mu.Unlock()
		for range 3 {
			w.release(normal, 0)
		}
		size := func() int {
			w.mu.Lock()
			defer w.mu.Unlock()
			mustCheck(t, &w.slots, "scale down")
			return w.slots.size
		}
		steps := []struct {
			name    string
			release int // attempts that end first
			sleep   time.Duration
			want    int
		}{
			{"before the window ends", 0, idle - time.Nanosecond, 8},
			{"after a window with 5 busy at most", 0, time.Nanosecond, 5},
			{"after a window with 2 busy", 0, idle, 2},
			{"half a window later", 2, idle / 2, 2},
			{"after a window that began with 2 busy", 0, idle / 2, 2},
			{"after an idle window: MinConcurrency", 0, idle, 1},
		}
		for _, st := range steps {
			for range st.release {
				w.release(normal, 0)
			}
			time.Sleep(st.sleep)
			w.scaleDown()
			if got := size(); got != st.want {
				t.Fatalf("%s: size %d, want %d", st.name, got, st.want)
			}
		}
		if w.slots.scaleDowns != 3 {
			t.Fatalf("%d scale-downs, want 3", w.slots.scaleDowns)
		}
	})
}

// Pulling ahead: a round asks for the idle slots plus ahead; tasks beyond
// the idle slots wait in the queue, a freed slot passes to a queued task,
// and ahead follows the round trip against the time in a slot.
func TestSlotsPullAhead(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		size, max int
		rtt, run  time.Duration
		want      int
	}{
		{4, 8, 0, time.Millisecond, 0},                           // no round trip known yet
		{4, 8, time.Millisecond, 0, 0},                           // no attempt finished yet
		{4, 8, 300 * time.Microsecond, 50 * time.Microsecond, 8}, // no-op tasks: as many as the cap
		{4, 8, 300 * time.Microsecond, 600 * time.Microsecond, 2},
		{4, 64, 300 * time.Microsecond, 50 * time.Microsecond, 24}, // what one round trip frees
		{10, 10, time.Millisecond, time.Second, 0},                 // long tasks are never pulled ahead
	} {
		if got := aheadFor(c.size, c.max, c.rtt, c.run); got != c.want {
			t.Errorf("aheadFor(%d, %d, %s, %s) = %d, want %d", c.size, c.max, c.rtt, c.run, got, c.want)
		}
	}

	// One priority with work: a small pool pulls up to minAhead ahead;
	// several: as many as its slots, so a round's shares stay interleaved.
	one, two := [numPriorities]int{spool.Normal: 5}, [numPriorities]int{spool.High: 5, spool.Normal: 5}
	for _, c := range []struct {
		max  int
		caps [numPriorities]int
		want int
	}{
		{8, one, minAhead},
		{8, two, 8},
		{100, one, 100},
		{100, two, 100},
	} {
		if got := aheadCap(c.max, c.caps); got != c.want {
			t.Errorf("aheadCap(%d, %v) = %d, want %d", c.max, c.caps, got, c.want)
		}
	}

	s := newSlots(2, 2)
	s.ahead = 2
	if s.free() != 4 {
		t.Fatalf("free %d, want the 2 idle slots and 2 ahead", s.free())
	}
	s.reserve(4, false)
	mustCheck(t, &s, "reserve")
	var ran, queued int
	for range 4 {
		s.arrive(false)
		if s.runnable(false) {
			s.take(spool.High)
			ran++
		} else {
			s.enqueue()
			queued++
		}
		mustCheck(t, &s, "arrival")
	}
	s.end(false, 0)
	if ran != 2 || queued != 2 || s.queued != 2 || s.free() != 0 || s.spare() != -2 {
		t.Fatalf("after the round: ran %d, queued %d, %+v, free %d, spare %d", ran, queued, s, s.free(), s.spare())
	}
	// A long-poll's task still runs at once (it reserved a slot of max).
	if !s.runnable(true) {
		t.Fatal("a long-poll's task must run at once")
	}
	s.handOver(spool.High, spool.Low)
	mustCheck(t, &s, "hand-over")
	if s.busy != 2 || s.queued != 1 || s.prio[spool.High] != 1 || s.prio[spool.Low] != 1 || s.free() != 1 {
		t.Fatalf("after a hand-over: %+v, free %d", s, s.free())
	}
	s.handOver(spool.High, spool.High)
	s.release(spool.High)
	s.release(spool.Low)
	mustCheck(t, &s, "releases")
	if s.busy != 0 || s.queued != 0 || s.free() != 4 {
		t.Fatalf("after the releases: %+v, free %d", s, s.free())
	}
}
