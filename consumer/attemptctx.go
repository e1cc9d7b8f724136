package consumer

import (
	"context"
	"sync"
	"time"
)

// attemptCtx is the context a handler runs under, one per attempt, with no
// timer and no goroutine of its own: a context.WithCancelCause (ctx) of a
// deadline context (dl) that the attempt's watch ends at the deadline, its
// timer firing for the heartbeats anyway. The handler gets ctx, a context
// of the standard library, so everything it derives from it attaches to it
// as it would to any cancellable context, without a goroutine.
//
// ctx ends with its own cancel (a cancelled task's ErrCancelled, the
// shutdown's cause, the attempt's end) or when dl does. The context
// package cannot attach ctx to dl directly (dl is not one of its types)
// and registers it through dl's AfterFunc, which ends ctx with dl's Err:
// context.DeadlineExceeded, so ctx and what the handler derived from it
// report DeadlineExceeded at the deadline, as under a timer of their own.
type attemptCtx struct {
	ctx    context.Context
	cancel context.CancelCauseFunc
	dl     deadlineCtx
}

// handlerBase is hard's values without its cancellation: the parent of
// every attempt's context. It is context.WithoutCancel under a value
// context, so a value looked up through it costs no allocation (a lookup
// that starts at WithoutCancel's context boxes that context each time).
func handlerBase(hard context.Context) context.Context {
	return context.WithValue(context.WithoutCancel(hard), handlerBaseKey{}, nil)
}

type handlerBaseKey struct{}

// init makes c the context of an attempt under base that ends at
// deadline.
func (c *attemptCtx) init(base context.Context, deadline time.Time) {
	c.dl.Context = base
	c.dl.deadline = deadline
	c.dl.afters = c.dl.buf[:0]
	c.ctx, c.cancel = context.WithCancelCause(&c.dl)
}

// expire ends the attempt's context at its deadline.
func (c *attemptCtx) expire() { c.dl.expire() }

// deadlineCtx is base with a deadline it reports, ended by expire. Only
// the attempt's ctx holds it.
type deadlineCtx struct {
	context.Context // base: values, and no cancellation of its own
	deadline        time.Time

	mu     sync.Mutex
	done   chan struct{} // made on the first call of Done
	err    error
	afters []func() // nil where stopped or run
	buf    [1]func()
}

// closedDone is the Done channel of a context ended before anyone asked
// for its channel.
var closedDone = func() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}()

func (c *deadlineCtx) Deadline() (time.Time, bool) { return c.deadline, true }

func (c *deadlineCtx) Done() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.done == nil {
		c.done = make(chan struct{})
	}
	return c.done
}

func (c *deadlineCtx) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

func (c *deadlineCtx) String() string { return "spool attempt deadline" }

// AfterFunc runs f once c ends, on the goroutine that ends it. The context
// package calls it as it derives a context from c: f cancels that context,
// a short call that takes no lock of c. It calls AfterFunc with the
// derived context's lock held, having seen c not ended, so when c ended
// meanwhile f runs on a goroutine of its own. stop unregisters f; it
// reports whether f was still to run.
func (c *deadlineCtx) AfterFunc(f func()) (stop func() bool) {
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		go f()
		return func() bool { return false }
	}
	i := len(c.afters)
	c.afters = append(c.afters, f)
	c.mu.Unlock()
	return func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.err != nil || c.afters[i] == nil {
			return false
		}
		c.afters[i] = nil
		return true
	}
}

// expire ends c with context.DeadlineExceeded, once, and runs what
// AfterFunc registered.
func (c *deadlineCtx) expire() {
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		return
	}
	c.err = context.DeadlineExceeded
	if c.done == nil {
		c.done = closedDone
	} else {
		close(c.done)
	}
	afters := c.afters
	c.mu.Unlock()
	for _, f := range afters {
		if f != nil {
			f()
		}
	}
}
