package httpapi

import (
	"context"
	"sync"
	"time"
)

// Cache timings of what the broker reads from the admin client.
const (
	// OverviewCacheTTL is how long one GET /v1/overview answer is reused, so
	// that many open dashboards cost JetStream one overview read per TTL.
	OverviewCacheTTL = 500 * time.Millisecond
	// overviewTimeout bounds one overview read.
	overviewTimeout = 3 * time.Second
	// StatusCacheTTL is how long one read of the queue's status
	// (admin.Client.Status) serves scrapes of /metrics.
	StatusCacheTTL = time.Second
	// StatusTimeout bounds one read of the queue's status.
	StatusTimeout = 2 * time.Second
)

// cached serves the last answer of read for ttl, then reads again. Reads
// are serialised, so concurrent callers share one read; errors are cached
// too, so callers polling an unreachable server do not queue behind it.
type cached[T any] struct {
	ttl, timeout time.Duration
	read         func(context.Context) (T, error)

	mu  sync.Mutex // held while reading
	at  time.Time
	val T
	err error
}

func newCached[T any](ttl, timeout time.Duration, read func(context.Context) (T, error)) *cached[T] {
	return &cached[T]{ttl: ttl, timeout: timeout, read: read}
}

// get returns the cached answer when younger than the TTL, else reads a
// new one under the cache's timeout. One caller's cancellation does not
// poison the answer others share.
func (c *cached[T]) get(ctx context.Context) (T, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.at.IsZero() && time.Since(c.at) < c.ttl {
		return c.val, c.err
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.timeout)
	defer cancel()
	c.val, c.err = c.read(rctx)
	c.at = time.Now()
	return c.val, c.err
}

// invalidate makes the next get read again (after a control changed what
// the cache holds).
func (c *cached[T]) invalidate() {
	c.mu.Lock()
	c.at = time.Time{}
	c.mu.Unlock()
}
