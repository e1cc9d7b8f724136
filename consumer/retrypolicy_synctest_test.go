package consumer

import (
	"testing"
	"testing/synctest"
	"time"
)

// A task that fails every attempt is retried on the backoff schedule: in
// fake time each retry comes exactly its backoff (plus jitter) after the
// failure, so the whole schedule of a task with ten retries (about 17
// minutes of real waiting) is checked at once.
func TestRetryScheduleSynctest(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		jitter float64
	}{
		{"no jitter", 0},
		{"default jitter", defaultConfig().RetryJitter},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				o := defaultConfig()
				o.RetryJitter = tc.jitter
				start := time.Now()
				var floor time.Duration // the schedule without jitter
				for attempt := 1; attempt <= 10; attempt++ {
					base := backoff(o.RetryBase, o.RetryMax, attempt)
					delay := o.retryDelay(attempt)
					if delay < base || delay > base+time.Duration(tc.jitter*float64(base)) {
						t.Fatalf("attempt %d: delay %s outside [%s, %s]", attempt, delay, base, base+time.Duration(tc.jitter*float64(base)))
					}
					before := time.Now()
					time.Sleep(delay) // fake time: returns at once
					if got := time.Since(before); got != delay {
						t.Fatalf("attempt %d: slept %s, want %s", attempt, got, delay)
					}
					floor += base
				}
				// 1+2+4+…+256 s, then the 5m cap.
				if want := 511*time.Second + 5*time.Minute; floor != want {
					t.Errorf("schedule without jitter %s, want %s", floor, want)
				}
				elapsed := time.Since(start)
				if elapsed < floor || elapsed > floor+time.Duration(tc.jitter*float64(floor)) {
					t.Errorf("ten retries took %s, want %s plus at most %.0f%%", elapsed, floor, tc.jitter*100)
				}
				if tc.jitter == 0 && elapsed != floor {
					t.Errorf("ten retries without jitter took %s, want exactly %s", elapsed, floor)
				}
			})
		})
	}
}

// A retry timer armed with the backoff fires no earlier than the backoff
// and not later: the redelivery a NAK-with-delay asks for.
func TestBackoffTimerSynctest(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		for attempt := 1; attempt <= 4; attempt++ {
			d := backoff(50*time.Millisecond, 150*time.Millisecond, attempt)
			armed := time.Now()
			fired := make(chan time.Time, 1)
			time.AfterFunc(d, func() { fired <- time.Now() })
			time.Sleep(d - time.Nanosecond)
			synctest.Wait()
			select {
			case at := <-fired:
				t.Fatalf("attempt %d: retry fired after %s, before its backoff %s", attempt, at.Sub(armed), d)
			default:
			}
			time.Sleep(time.Nanosecond)
			synctest.Wait()
			select {
			case at := <-fired:
				if at.Sub(armed) != d {
					t.Errorf("attempt %d: retry fired after %s, want %s", attempt, at.Sub(armed), d)
				}
			default:
				t.Fatalf("attempt %d: retry not fired after its backoff %s", attempt, d)
			}
		}
	})
}
