package lifecycle

import (
	"context"
	"errors"
	"sync"
)

// ErrStopped is returned by Start once Stop was called.
var ErrStopped = errors.New("already stopped")

// State is where a part is in its lifecycle.
type State int

// The states, in the order a part goes through them.
const (
	New      State = iota // created, not started
	Running               // started successfully
	Stopping              // Stop called, shutting down
	Stopped               // ended
)

// String returns the state's lower-case name.
func (s State) String() string {
	switch s {
	case New:
		return "new"
	case Running:
		return "running"
	case Stopping:
		return "stopping"
	case Stopped:
		return "stopped"
	}
	return "unknown"
}

// Lifecycle tracks one part's start and stop. The zero value is ready to
// use; it must not be copied after first use.
type Lifecycle struct {
	mu       sync.Mutex
	state    State
	started  chan struct{}
	stopping chan struct{}
	stopped  chan struct{}
	startRan bool
	startErr error
	hard     func()
	hardOnce sync.Once
}

func (l *Lifecycle) initLocked() {
	if l.started == nil {
		l.started = make(chan struct{})
		l.stopping = make(chan struct{})
		l.stopped = make(chan struct{})
	}
}

// Start runs start once, under ctx. It returns start's error (the part
// then never runs and counts as stopped), the first call's result on later
// calls, and ErrStopped after Stop. start runs under the lifecycle's lock:
// it must not call Stop.
func (l *Lifecycle) Start(ctx context.Context, start func(ctx context.Context) error) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.initLocked()
	if l.startRan {
		return l.startErr
	}
	if l.state != New {
		return ErrStopped
	}
	l.startRan = true
	if err := start(ctx); err != nil {
		l.startErr = err
		l.state = Stopped
		close(l.stopping)
		close(l.stopped)
		return err
	}
	l.state = Running
	close(l.started)
	return nil
}

// Stop stops the part: the first call closes Stopping and, if the part is
// running, runs shutdown on a goroutine of its own; Stopped closes when
// shutdown returns. Every call waits for Stopped or for ctx to end; when
// ctx ends first, hard (if not nil) is called once, to make shutdown
// abandon what it waits for, and Stop returns ctx.Err() at once.
func (l *Lifecycle) Stop(ctx context.Context, shutdown func(), hard func()) error {
	l.mu.Lock()
	l.initLocked()
	switch l.state {
	case New:
		l.startRan = true
		l.startErr = ErrStopped
		l.state = Stopped
		close(l.stopping)
		close(l.stopped)
	case Running:
		l.state = Stopping
		l.hard = hard
		close(l.stopping)
		go func() {
			shutdown()
			l.mu.Lock()
			l.state = Stopped
			l.mu.Unlock()
			close(l.stopped)
		}()
	}
	stopped := l.stopped
	l.mu.Unlock()
	select {
	case <-stopped:
		return nil
	case <-ctx.Done():
		l.Abort()
		return ctx.Err()
	}
}

// Abort calls the hard-stop function given to the first Stop, once; it does
// nothing before Stop.
func (l *Lifecycle) Abort() {
	l.mu.Lock()
	hard := l.hard
	l.mu.Unlock()
	if hard != nil {
		l.hardOnce.Do(hard)
	}
}

// State returns the current state.
func (l *Lifecycle) State() State {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.state
}

// Started is closed once start-up has succeeded.
func (l *Lifecycle) Started() <-chan struct{} { return l.chans().started }

// Stopping is closed once Stop was called (or start-up failed).
func (l *Lifecycle) Stopping() <-chan struct{} { return l.chans().stopping }

// Stopped is closed once the part has ended.
func (l *Lifecycle) Stopped() <-chan struct{} { return l.chans().stopped }

// IsStopping reports whether Stopping is closed.
func (l *Lifecycle) IsStopping() bool {
	select {
	case <-l.Stopping():
		return true
	default:
		return false
	}
}

func (l *Lifecycle) chans() *Lifecycle {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.initLocked()
	return l
}

// Ended records that a running part ended by itself (its connection closed
// for good, say): Stopping and Stopped close, and a later Stop returns at
// once. While a Stop is under way it does nothing: that Stop's shutdown
// ends the part.
func (l *Lifecycle) Ended() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.state != Running {
		return
	}
	l.state = Stopped
	close(l.stopping)
	close(l.stopped)
}
