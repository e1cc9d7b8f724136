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
