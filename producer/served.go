package producer

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/spoolq/spool/streams/admin"
)

// Timings of the check of a task's type against the types the workers
// serve (EnqueueResult.Warning).
const (
	// ServedCheckEvery is how long the client uses one reading of the
	// types the workers serve. The first enqueue after it reads them
	// again in the background, and enqueues meanwhile use the last one.
	ServedCheckEvery = 5 * time.Second
	// ServedCheckTimeout bounds one reading. The client's first enqueue
	// waits for the first reading at most this long; no other enqueue
	// waits for one.
	ServedCheckTimeout = 500 * time.Millisecond
	// servedRetry is how long after a failed reading the next one starts.
	// Until then no task gets a warning.
	servedRetry = time.Minute
	// maxVerdicts caps the task types whose warnings one reading keeps;
	// the others are worked out again at each enqueue.
	maxVerdicts = 10_000
)

// served checks task types against admin.Serving, read at most every
// ServedCheckEvery in the background, so an enqueue pays a map lookup. A
// reading that fails leaves no reading, and so no warning, until the next
// one succeeds.
type served struct {
	adm    *admin.Client // nil: the check is off
	logger *slog.Logger

	snap  atomic.Pointer[servedSnap] // the last reading; nil when it failed or none ended
	due   atomic.Int64               // when the next reading may start, in Unix nanoseconds
	ended atomic.Bool                // a reading ended

	mu      sync.Mutex
	reading chan struct{}      // closed when the reading in flight ends; nil when none runs
	cancel  context.CancelFunc // ends the reading in flight
}

// servedSnap is one reading with the warnings worked out from it, once
// per task type.
type servedSnap struct {
	serving  admin.Serving
	verdicts sync.Map // task type → its warning, "" when served
	kept     atomic.Int64
}

// refresh starts a reading in the background when, at now, the last one
// is ServedCheckEvery old and none runs. ctx gives the reading its values,
// not its end: the reading is bounded by ServedCheckTimeout alone. now is
// the caller's: a clock read costs more than the rest of the check.
func (s *served) refresh(ctx context.Context, now time.Time) {
	if s.adm == nil || now.UnixNano() < s.due.Load() {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.reading != nil || now.UnixNano() < s.due.Load() {
		return
	}
	s.due.Store(now.Add(ServedCheckEvery).UnixNano())
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), ServedCheckTimeout)
	done := make(chan struct{})
	s.reading, s.cancel = done, cancel
	go s.read(rctx, cancel, done)
}

func (s *served) read(ctx context.Context, cancel context.CancelFunc, done chan struct{}) {
	defer close(done)
	defer cancel()
	sv, err := s.adm.Serving(ctx)
	next := ServedCheckEvery
	switch {
	case errors.Is(ctx.Err(), context.Canceled):
		next = 0 // ended by close: the next enqueue reads again
	case err != nil:
		s.logger.DebugContext(ctx, "reading which task types the workers serve: enqueues warn of none until a reading succeeds", "error", err)
		s.snap.Store(nil)
		next = servedRetry
	default:
		s.snap.Store(&servedSnap{serving: sv})
	}
	s.ended.Store(true)
	s.mu.Lock()
	s.due.Store(time.Now().Add(next).UnixNano())
	s.reading, s.cancel = nil, nil
	s.mu.Unlock()
}

// settle waits, until ctx ends, for the first reading when none ended
// yet: a client's first enqueue gets its warning too.
func (s *served) settle(ctx context.Context) {
	if s.ended.Load() {
		return
	}
	s.mu.Lock()
	reading := s.reading
	s.mu.Unlock()
	if reading == nil {
		return
	}
	select {
	case <-reading:
	case <-ctx.Done():
	}
}

// warning returns the warning of a task of type typ from the last
// reading: "" when a worker serves the type or no reading holds.
func (s *served) warning(typ string) string {
	snap := s.snap.Load()
	if snap == nil {
		return ""
	}
	if w, ok := snap.verdicts.Load(typ); ok {
		return w.(string)
	}
	w := snap.serving.Unserved(typ)
	if snap.kept.Add(1) <= maxVerdicts {
		snap.verdicts.Store(typ, w)
	}
	return w
}

// close ends the reading in flight and waits for it.
func (s *served) close() {
	s.mu.Lock()
	reading, cancel := s.reading, s.cancel
	s.mu.Unlock()
	if cancel != nil {
		cancel()
		<-reading
	}
}
