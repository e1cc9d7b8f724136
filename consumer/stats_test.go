package consumer_test

import (
	"strings"
	"testing"
	"time"

	"github.com/spoolq/spool/consumer"
	spool "github.com/spoolq/spool/shared"
)

func TestDistributionQuantile(t *testing.T) {
	t.Parallel()
	var d consumer.Distribution
	d.Counts = make([]uint64, len(consumer.DistributionBounds())+1)
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
	if (consumer.Distribution{}).Quantile(0.5) != 0 {
		t.Error("empty distribution has a quantile")
	}
}

func TestStatsSummary(t *testing.T) {
	t.Parallel()
	s := consumer.Stats{State: consumer.WorkerBusy, Slots: 4, Busy: 3, MaxSlots: 10}
	for _, p := range spool.Priorities {
		s.Priorities = append(s.Priorities, consumer.PriorityStats{Priority: p, Counters: consumer.Counters{Completed: 2, Failed: 1}, Backlog: uint64(p)})
	}
	s.Priorities[spool.Idle].OldestWait = 95 * time.Second
	if tot := s.Total(); tot.Completed != 10 || tot.Failed != 5 {
		t.Errorf("Total %+v", tot)
	}
	line := s.Summary()
	for _, want := range []string{"3/4 busy", "done 10", "failed 5", "idle=4(1m35s)", "critical=0"} {
		if !strings.Contains(line, want) {
			t.Errorf("summary %q lacks %q", line, want)
		}
	}
}
