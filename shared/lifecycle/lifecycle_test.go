package lifecycle_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/spoolq/spool/shared/lifecycle"
)

func closed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

func TestStartOnce(t *testing.T) {
	t.Parallel()
	var l lifecycle.Lifecycle
	var calls atomic.Int32
	start := func(context.Context) error { calls.Add(1); return nil }
	for range 3 {
		if err := l.Start(t.Context(), start); err != nil {
			t.Fatalf("Start: %v", err)
		}
	}
	if calls.Load() != 1 || l.State() != lifecycle.Running || !closed(l.Started()) || closed(l.Stopping()) {
		t.Fatalf("calls %d state %s started %v stopping %v", calls.Load(), l.State(), closed(l.Started()), closed(l.Stopping()))
	}
}

func TestStartFailureIsFinal(t *testing.T) {
	t.Parallel()
	var l lifecycle.Lifecycle
	boom := errors.New("boom")
	if err := l.Start(t.Context(), func(context.Context) error { return boom }); !errors.Is(err, boom) {
		t.Fatalf("Start = %v", err)
	}
	if err := l.Start(t.Context(), func(context.Context) error { return nil }); !errors.Is(err, boom) {
		t.Fatalf("second Start = %v, want the first error", err)
	}
	if closed(l.Started()) || !closed(l.Stopped()) || l.State() != lifecycle.Stopped {
		t.Fatalf("after a failed start: started %v stopped %v state %s", closed(l.Started()), closed(l.Stopped()), l.State())
	}
	if err := l.Stop(t.Context(), func() { t.Error("shutdown ran for a part that never started") }, nil); err != nil {
		t.Fatalf("Stop = %v", err)
	}
}

func TestStopBeforeStart(t *testing.T) {
	t.Parallel()
	var l lifecycle.Lifecycle
	if err := l.Stop(t.Context(), func() { t.Error("shutdown ran before start") }, nil); err != nil {
		t.Fatalf("Stop = %v", err)
	}
	if err := l.Start(t.Context(), func(context.Context) error { t.Error("start ran after Stop"); return nil }); !errors.Is(err, lifecycle.ErrStopped) {
		t.Fatalf("Start after Stop = %v, want ErrStopped", err)
	}
}

func TestStopGracefulIdempotentConcurrent(t *testing.T) {
	t.Parallel()
	var l lifecycle.Lifecycle
	if err := l.Start(t.Context(), func(context.Context) error { return nil }); err != nil {
		t.Fatal(err)
	}
	var shutdowns atomic.Int32
	release := make(chan struct{})
	shutdown := func() { shutdowns.Add(1); <-release }
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for range 4 {
		wg.Go(func() { errs <- l.Stop(t.Context(), shutdown, nil) })
	}
	<-l.Stopping()
	if closed(l.Stopped()) {
		t.Fatal("Stopped closed while shutdown runs")
	}
	close(release)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Errorf("Stop = %v", err)
		}
	}
	if shutdowns.Load() != 1 || l.State() != lifecycle.Stopped {
		t.Fatalf("shutdowns %d state %s", shutdowns.Load(), l.State())
	}
}

// A Stop whose context ends first calls the hard stop once and returns the
// context's error; the part still ends, and Stopped says when.
func TestStopDeadlineIsHard(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		var l lifecycle.Lifecycle
		if err := l.Start(t.Context(), func(context.Context) error { return nil }); err != nil {
			t.Fatal(err)
		}
		abandon := make(chan struct{})
		var hards atomic.Int32
		hard := func() { hards.Add(1); close(abandon) }
		shutdown := func() {
			select {
			case <-abandon:
			case <-time.After(time.Hour):
				t.Error("shutdown was not told to stop hard")
			}
		}
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		if err := l.Stop(ctx, shutdown, hard); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Stop = %v, want the deadline", err)
		}
		<-l.Stopped()
		ctx2, cancel2 := context.WithTimeout(t.Context(), time.Second)
		defer cancel2()
		if err := l.Stop(ctx2, shutdown, hard); err != nil {
			t.Fatalf("second Stop = %v", err)
		}
		l.Abort()
		if hards.Load() != 1 {
			t.Fatalf("hard stop ran %d times", hards.Load())
		}
	})
}

func TestEnded(t *testing.T) {
	t.Parallel()
	var l lifecycle.Lifecycle
	l.Ended() // before start: nothing
	if closed(l.Stopped()) {
		t.Fatal("Ended before Start closed Stopped")
	}
	if err := l.Start(t.Context(), func(context.Context) error { return nil }); err != nil {
		t.Fatal(err)
	}
	l.Ended()
	if !closed(l.Stopping()) || !closed(l.Stopped()) || l.State() != lifecycle.Stopped {
		t.Fatalf("after Ended: state %s", l.State())
	}
	if err := l.Stop(t.Context(), func() { t.Error("shutdown ran after the part ended") }, nil); err != nil {
		t.Fatalf("Stop = %v", err)
	}
}
