package consumer

import "time"

// WithClock replaces the clock used for task ages (the boost), so a test
// can age tasks without waiting.
func WithClock(now func() time.Time) Option {
	return func(o *config) error {
		o.now = now
		return nil
	}
}

// Backoff is the retry backoff, for tests that check the gaps between
// attempts.
var Backoff = backoff

// Settled reports whether the worker has pulled every lane once since it
// started and no fetch is out: a task published after that reaches the
// worker only through a long-poll, a wake-up or a refresh.
func Settled(w *Worker) bool {
	d := w.disp
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.slots.fetching > 0 {
		return false
	}
	for i := range d.lanes {
		if d.lanes[i].maybe {
			return false
		}
	}
	return true
}

// Woken is the number of the worker's lanes woken by a publish and not
// pulled since.
func Woken(w *Worker) int {
	d := w.disp
	d.mu.Lock()
	defer d.mu.Unlock()
	n := 0
	for i := range d.lanes {
		if d.lanes[i].woken {
			n++
		}
	}
	return n
}
