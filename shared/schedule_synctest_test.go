package spool_test

import (
	"testing"
	"testing/synctest"
	"time"

	spool "github.com/spoolq/spool/shared"
)

// FormatScheduleAt renders "now plus a delay" with its sub-second part, in
// UTC, whatever the caller's zone: in a synctest bubble the clock starts at
// 2000-01-01T00:00:00Z and moves only when the bubble sleeps, so the exact
// values can be checked.
func TestFormatScheduleAtSynctest(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		tests := []struct {
			sleep, delay time.Duration
			want         string
		}{
			{0, 0, "@at 2000-01-01T00:00:00Z"},
			{0, 1500 * time.Millisecond, "@at 2000-01-01T00:00:01.5Z"},
			{250 * time.Millisecond, time.Second, "@at 2000-01-01T00:00:01.25Z"}, // 0.25s + 1s
			{time.Nanosecond, 0, "@at 2000-01-01T00:00:00.250000001Z"},           // nanoseconds kept
			{time.Hour, 24 * time.Hour, "@at 2000-01-02T01:00:00.250000001Z"},    // next day
		}
		zone := time.FixedZone("UTC+5", 5*3600)
		for _, tc := range tests {
			time.Sleep(tc.sleep)
			at := time.Now().Add(tc.delay)
			if got := spool.FormatScheduleAt(at); got != tc.want {
				t.Errorf("FormatScheduleAt(now+%s) = %q, want %q", tc.delay, got, tc.want)
			}
			if got := spool.FormatScheduleAt(at.In(zone)); got != tc.want {
				t.Errorf("FormatScheduleAt(now+%s in UTC+5) = %q, want %q", tc.delay, got, tc.want)
			}
			parsed, err := time.Parse(time.RFC3339Nano, tc.want[len("@at "):])
			if err != nil || !parsed.Equal(at) {
				t.Errorf("%q does not parse back to %s: %v", tc.want, at, err)
			}
		}
	})
}
