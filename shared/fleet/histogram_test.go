package fleet_test

import (
	"testing"
	"time"

	"github.com/spoolq/spool/shared/fleet"
)

func TestHistogramQuantile(t *testing.T) {
	t.Parallel()
	var d fleet.Histogram
	d.Counts = make([]uint64, len(fleet.Bounds())+1)
	// 90 observations in (50µs, 100µs], 10 in (800µs, 1.6ms].
	d.Counts[1], d.Counts[5] = 90, 10
	d.Count = 100
	d.Sum = 90*75*time.Microsecond + 10*time.Millisecond
	tests := []struct {
		q        float64
		min, max time.Duration
	}{
		{0.5, 50 * time.Microsecond, 100 * time.Microsecond},
		{0.9, 99 * time.Microsecond, 100 * time.Microsecond},
		{0.99, 800 * time.Microsecond, 1600 * time.Microsecond},
	}
	for _, tc := range tests {
		if got := d.Quantile(tc.q); got < tc.min || got > tc.max {
			t.Errorf("Quantile(%g) = %s, want within [%s, %s]", tc.q, got, tc.min, tc.max)
		}
	}
	if got := d.Mean(); got != 167500*time.Nanosecond {
		t.Errorf("Mean = %s", got)
	}
	if (fleet.Histogram{}).Quantile(0.5) != 0 {
		t.Error("empty histogram has a quantile")
	}
}

func TestHistogramMerge(t *testing.T) {
	t.Parallel()
	var a, b fleet.Histogram
	a.Observe(time.Millisecond)
	b.Observe(time.Second)
	b.Observe(time.Second)
	c := a.Clone()
	c.Merge(b)
	if c.Count != 3 || c.Sum != time.Millisecond+2*time.Second || a.Count != 1 {
		t.Fatalf("merged %+v from %+v", c, a)
	}
	h, ok := fleet.Summarize(c, true).Histogram()
	if !ok || h.Count != 3 || h.Quantile(1) != c.Quantile(1) {
		t.Errorf("summary round trip: %+v %v", h, ok)
	}
	if _, ok := fleet.Summarize(c, false).Histogram(); ok {
		t.Error("a summary without counts gave a histogram")
	}
}
