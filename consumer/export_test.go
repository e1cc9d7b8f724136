package consumer

import "time"

// WithClock replaces the clock used for task ages (the boost), so a test
// can age tasks without waiting.
func WithClock(now func() time.Time) Option {
	return func(o *Options) error {
		o.now = now
		return nil
	}
}
