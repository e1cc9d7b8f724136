package consumer

import (
	"context"
	"errors"
	"runtime"
	"testing"
	"time"
)

type ctxKey struct{}

// newAttemptCtx is an attempt context under a base without cancellation
// that carries a value, as the worker makes them.
func newAttemptCtx(deadline time.Time) *attemptCtx {
	c := &attemptCtx{}
	c.init(handlerBase(context.WithValue(context.Background(), ctxKey{}, "base")), deadline)
	return c
}

// ended reports whether ctx's Done channel is closed.
func ended(ctx context.Context) bool {
	select {
	case <-ctx.Done():
		return true
	default:
		return false
	}
}

// The attempt's context reports its deadline, and ending it there makes it
// and the contexts a handler derives from it, directly or under a value,
// report DeadlineExceeded, as contexts under a timer of their own do.
func TestAttemptCtxDeadline(t *testing.T) {
	dl := time.Now().Add(time.Hour)
	c := newAttemptCtx(dl)
	if got, ok := c.ctx.Deadline(); !ok || !got.Equal(dl) {
		t.Fatalf("Deadline() = %v, %v, want %v, true", got, ok, dl)
	}
	if c.ctx.Value(ctxKey{}) != "base" {
		t.Error("the attempt's context lost the base's value")
	}
	if n := testing.AllocsPerRun(100, func() { c.ctx.Value(ctxKey{}) }); n != 0 {
		t.Errorf("looking a value up allocates %.0f times", n)
	}
	derived, cancel := context.WithCancel(c.ctx)
	defer cancel()
	longer, cancelLonger := context.WithTimeout(context.WithValue(c.ctx, ctxKey{}, "handler"), 2*time.Hour)
	defer cancelLonger()
	if got, _ := longer.Deadline(); !got.Equal(dl) {
		t.Errorf("a longer timeout derived from it has deadline %v, want the attempt's %v", got, dl)
	}
	fired := make(chan struct{})
	context.AfterFunc(c.ctx, func() { close(fired) })
	all := []context.Context{c.ctx, derived, longer}
	for _, ctx := range all {
		if ctx.Err() != nil || ended(ctx) {
			t.Fatalf("%v ended before its deadline: %v", ctx, ctx.Err())
		}
	}
	c.expire()
	for _, ctx := range all {
		if !ended(ctx) || !errors.Is(ctx.Err(), context.DeadlineExceeded) || !errors.Is(context.Cause(ctx), context.DeadlineExceeded) {
			t.Errorf("%v: ended %v, Err %v, Cause %v, want DeadlineExceeded", ctx, ended(ctx), ctx.Err(), context.Cause(ctx))
		}
	}
	select {
	case <-fired:
	case <-time.After(10 * time.Second):
		t.Fatal("context.AfterFunc never ran")
	}
	// The first end wins.
	c.cancel(ErrCancelled)
	if !errors.Is(c.ctx.Err(), context.DeadlineExceeded) {
		t.Errorf("after a later cancel: Err %v, want DeadlineExceeded", c.ctx.Err())
	}
}

// A cancelled task's context, and what the handler derived from it, end
// with context.Canceled and the cause given, and no later deadline
// changes that.
func TestAttemptCtxCause(t *testing.T) {
	shutdown := errors.New("shutdown")
	for _, cause := range []error{ErrCancelled, shutdown} {
		c := newAttemptCtx(time.Now().Add(time.Hour))
		derived, cancel := context.WithCancel(context.WithValue(c.ctx, ctxKey{}, "handler"))
		defer cancel()
		c.cancel(cause)
		c.expire()
		for _, ctx := range []context.Context{c.ctx, derived} {
			if !ended(ctx) || !errors.Is(ctx.Err(), context.Canceled) || !errors.Is(context.Cause(ctx), cause) {
				t.Errorf("%v: ended %v, Err %v, Cause %v, want Canceled and %v", ctx, ended(ctx), ctx.Err(), context.Cause(ctx), cause)
			}
		}
	}
}

// Neither an attempt's context nor the contexts derived from it cost a
// goroutine, and an attempt's context that ends is no longer registered
// with its deadline.
func TestAttemptCtxNoGoroutines(t *testing.T) {
	const n = 1_000
	before := runtime.NumGoroutine()
	cs := make([]*attemptCtx, n)
	cancels := make([]context.CancelFunc, 0, 2*n)
	for i := range cs {
		cs[i] = newAttemptCtx(time.Now().Add(time.Hour))
		_, cancel := context.WithCancel(cs[i].ctx)
		cancels = append(cancels, cancel)
		_, cancel = context.WithTimeout(context.WithValue(cs[i].ctx, ctxKey{}, i), 2*time.Hour)
		cancels = append(cancels, cancel)
	}
	if after := runtime.NumGoroutine(); after-before >= n/10 {
		t.Errorf("%d goroutines for %d attempts' contexts and %d derived ones", after-before, n, 2*n)
	}
	for _, cancel := range cancels {
		cancel()
	}
	for _, c := range cs {
		c.cancel(nil)
		c.dl.mu.Lock()
		for _, f := range c.dl.afters {
			if f != nil {
				t.Fatal("an ended attempt's context is still registered with its deadline")
			}
		}
		c.dl.mu.Unlock()
	}
}
