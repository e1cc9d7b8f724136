package consumer

import (
	"testing"
	"time"
)

func TestBackoff(t *testing.T) {
	t.Parallel()
	tests := []struct {
		base, max time.Duration
		attempt   int
		want      time.Duration
	}{
		{time.Second, 5 * time.Minute, 1, time.Second},
		{time.Second, 5 * time.Minute, 2, 2 * time.Second},
		{time.Second, 5 * time.Minute, 3, 4 * time.Second},
		{time.Second, 5 * time.Minute, 9, 256 * time.Second},
		{time.Second, 5 * time.Minute, 10, 5 * time.Minute},
		{time.Second, 5 * time.Minute, 1000, 5 * time.Minute},
		{time.Second, 5 * time.Minute, 0, time.Second},
		{50 * time.Millisecond, 150 * time.Millisecond, 3, 150 * time.Millisecond},
		{time.Hour, 24 * time.Hour, 64, 24 * time.Hour},
	}
	for _, tc := range tests {
		if got := backoff(tc.base, tc.max, tc.attempt); got != tc.want {
			t.Errorf("Backoff(%s, %s, %d) = %s, want %s", tc.base, tc.max, tc.attempt, got, tc.want)
		}
	}
}

func TestJitterBounds(t *testing.T) {
	t.Parallel()
	d := time.Second
	seenAbove := false
	for range 1000 {
		j := jitter(d, 0.2)
		if j < d || j >= d+200*time.Millisecond {
			t.Fatalf("Jitter(1s, 0.2) = %s, want [1s, 1.2s)", j)
		}
		seenAbove = seenAbove || j > d
	}
	if !seenAbove {
		t.Error("jitter never added anything")
	}
	if got := jitter(d, 0); got != d {
		t.Errorf("Jitter(1s, 0) = %s", got)
	}
}
