package consumer

import (
	"math"
	"testing"
	"time"

	spool "github.com/spoolq/spool/shared"
)

// Smooth weighted round-robin gives every priority its weight share within
// one pick, whatever the batch sizes the free slots come in.
func TestSchedulerWeightedShares(t *testing.T) {
	t.Parallel()
	for _, batch := range []int{1, 3, 10} {
		s := newScheduler(defaultConfig())
		caps := [numPriorities]int{1000, 1000, 1000, 1000, 1000}
		eff := [numPriorities]float64(DefaultWeights())
		var got [numPriorities]int
		const picks = 2400
		for n := 0; n < picks; n += batch {
			a := s.allocate(batch, caps, eff)
			for p := range a {
				got[p] += a[p]
			}
		}
		var sum float64
		for _, w := range DefaultWeights() {
			sum += w
		}
		total := 0
		for _, g := range got {
			total += g
		}
		for p, w := range DefaultWeights() {
			want := w / sum * float64(total)
			if math.Abs(float64(got[p])-want) > 1+float64(batch) {
				t.Errorf("batch %d: %s got %d picks, want %.1f", batch, spool.Priority(p), got[p], want)
			}
		}
	}
}

func TestSchedulerCapsAndStrict(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		strict bool
		n      int
		caps   [numPriorities]int
		want   [numPriorities]int
	}{
		{"strict takes the most urgent", true, 4, [numPriorities]int{0, 10, 10, 0, 10}, [numPriorities]int{0, 4, 0, 0, 0}},
		{"strict spills past a capped priority", true, 4, [numPriorities]int{1, 2, 10, 0, 0}, [numPriorities]int{1, 2, 1, 0, 0}},
		{"weighted respects caps", false, 5, [numPriorities]int{1, 0, 0, 0, 1}, [numPriorities]int{1, 0, 0, 0, 1}},
		{"nothing to take", false, 3, [numPriorities]int{}, [numPriorities]int{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o := defaultConfig()
			o.Strict = tc.strict
			got := newScheduler(o).allocate(tc.n, tc.caps, [numPriorities]float64(DefaultWeights()))
			if got != tc.want {
				t.Errorf("allocate = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestBoostFor(t *testing.T) {
	t.Parallel()
	steps := defaultBoost()
	tests := []struct {
		age  time.Duration
		want float64
	}{
		{0, 1}, {29 * time.Second, 1}, {30 * time.Second, 1.5}, {59 * time.Second, 1.5},
		{60 * time.Second, 1.75}, {90 * time.Second, 2}, {time.Hour, 2},
	}
	for _, tc := range tests {
		if got := boostFor(steps, tc.age); got != tc.want {
			t.Errorf("boostFor(%s) = %g, want %g", tc.age, got, tc.want)
		}
	}
	s := newScheduler(defaultConfig())
	now := time.Now()
	eff := s.effective(now, [numPriorities]time.Time{now.Add(-time.Minute), {}, {}, {}, now.Add(-2 * time.Minute)})
	if eff[spool.Critical] != 1.75 || eff[spool.High] != 0.7 || math.Abs(eff[spool.Idle]-0.2) > 1e-9 {
		t.Errorf("effective weights %v", eff)
	}
}
