package consumer

import (
	"math/rand/v2"
	"time"
)

// backoff is the delay before the attempt after failed attempt number
// attempt (counting from 1): min(base·2^(attempt-1), maxDelay). It never
// overflows.
func backoff(base, maxDelay time.Duration, attempt int) time.Duration {
	if attempt < 1 {
		attempt = 1
	}
	d := base
	for i := 1; i < attempt; i++ {
		if d >= maxDelay || d > maxDelay/2 {
			return maxDelay
		}
		d *= 2
	}
	return min(d, maxDelay)
}

// jitter adds a uniformly random delay of [0, frac·d) to d, so retries of
// tasks that failed together spread out. frac 0 returns d.
func jitter(d time.Duration, frac float64) time.Duration {
	if frac <= 0 || d <= 0 {
		return d
	}
	return d + time.Duration(rand.Float64()*frac*float64(d))
}

// retryDelay is the NAK delay after failed attempt number attempt.
func (o config) retryDelay(attempt int) time.Duration {
	return jitter(backoff(o.RetryBase, o.RetryMax, attempt), o.RetryJitter)
}
