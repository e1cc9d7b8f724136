package consumer

import (
	"math"
	"testing"
	"testing/synctest"
	"time"

	spool "github.com/spoolq/spool/shared"
)

// The aging boost steps up as the oldest waiting task of a priority ages in
// (fake) real time: ×1 until 30s, ×1.5, ×1.75 from 60s, capped at ×2 from
// 90s, and back to ×1 for a priority with nothing waiting.
func TestBoostAgesSynctest(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		s := newScheduler(defaultConfig())
		enqueued := time.Now() // the idle task's stream timestamp
		w := DefaultWeights()
		steps := []struct {
			sleep time.Duration // after the previous step
			want  float64       // boost of the idle priority
		}{
			{0, 1},
			{29 * time.Second, 1},
			{time.Second, 1.5}, // 30s
			{29 * time.Second, 1.5},
			{time.Second, 1.75}, // 60s
			{30 * time.Second, 2},
			{time.Hour, 2}, // the cap
		}
		for _, st := range steps {
			time.Sleep(st.sleep)
			age := time.Since(enqueued)
			eff := s.effective(time.Now(), [numPriorities]time.Time{spool.Idle: enqueued})
			if got := eff[spool.Idle] / w[spool.Idle]; math.Abs(got-st.want) > 1e-9 {
				t.Errorf("at age %s: idle boost ×%g, want ×%g", age, got, st.want)
			}
			for _, p := range []spool.Priority{spool.Critical, spool.High, spool.Normal, spool.Low} {
				if eff[p] != w[p] {
					t.Errorf("at age %s: %s (nothing waiting) weight %g, want its own %g", age, p, eff[p], w[p])
				}
			}
		}
	})
}

// The worker reads task ages from its clock: in a synctest bubble the
// default clock is the fake one, so a backlog that waits long enough gains
// picks over a fresher, more urgent one as time passes.
func TestBoostShiftsPicksSynctest(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		o := defaultConfig()
		idleSince := o.now() // the idle backlog's oldest task
		caps := [numPriorities]int{spool.High: 1000, spool.Idle: 1000}
		picks := func() [numPriorities]int {
			s := newScheduler(o)
			// The high backlog is always fresh; the idle one ages.
			oldest := [numPriorities]time.Time{spool.High: o.now(), spool.Idle: idleSince}
			var got [numPriorities]int
			for range 72 {
				a := s.allocate(1, caps, s.effective(o.now(), oldest))
				for p := range a {
					got[p] += a[p]
				}
			}
			return got
		}
		fresh := picks()
		time.Sleep(90 * time.Second) // the idle backlog reaches the ×2 cap
		aged := picks()
		// high 0.7 : idle 0.1 → 63 : 9 of 72 picks; with idle ×2,
		// 0.7 : 0.2 → 56 : 16. Smooth round-robin is within one pick.
		if d := fresh[spool.Idle] - 9; d < -1 || d > 1 {
			t.Errorf("fresh: idle got %d of 72 picks, want 9", fresh[spool.Idle])
		}
		if d := aged[spool.Idle] - 16; d < -1 || d > 1 {
			t.Errorf("after 90s: idle got %d of 72 picks, want 16", aged[spool.Idle])
		}
		if fresh[spool.High]+fresh[spool.Idle] != 72 || aged[spool.High]+aged[spool.Idle] != 72 {
			t.Errorf("picks went elsewhere: fresh %v, aged %v", fresh, aged)
		}
	})
}
