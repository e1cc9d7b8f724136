package main

import (
	"context"
	"sync"
	"time"
)

// shutdown is the one deadline of everything run stops: the worker, the
// DLQ router, the metrics listener and the trace exporter. Its clock starts
// at the first call to context, once ctx has ended or start-up failed.
type shutdown struct {
	parent  context.Context
	timeout time.Duration

	once sync.Once
	ctx  context.Context
	stop context.CancelFunc
}

func newShutdown(parent context.Context, timeout time.Duration) *shutdown {
	return &shutdown{parent: context.WithoutCancel(parent), timeout: timeout}
}

// context returns the context that ends at the deadline, starting the
// clock on the first call.
func (s *shutdown) context() context.Context {
	s.once.Do(func() {
		s.ctx, s.stop = context.WithTimeout(s.parent, s.timeout)
	})
	return s.ctx
}

// within returns a context that ends after d or at the deadline, whichever
// comes first.
func (s *shutdown) within(d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(s.context(), d)
}

// cancel releases the deadline's timer.
func (s *shutdown) cancel() {
	s.context()
	s.stop()
}
