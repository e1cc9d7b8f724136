package consumer

import (
	"io"
	"log/slog"
	"slices"
	"testing"

	spool "github.com/spoolq/spool/shared"
)

// runningOf lists the attempts registered for id, newest first.
func (c *cancels) runningOf(id string) []*watch {
	c.mu.Lock()
	defer c.mu.Unlock()
	var hs []*watch
	for h := c.running[id]; h != nil; h = h.sameTask {
		hs = append(hs, h)
	}
	return hs
}

// TestCancelsRunningList: attempts of one task (a redelivery overlapping
// an overstaying handler) are registered and removed in any order, and
// each task's list holds only its own attempts.
func TestCancelsRunningList(t *testing.T) {
	c := &cancels{
		log:     slog.New(slog.NewTextHandler(io.Discard, nil)),
		ids:     make(map[string]*spool.Cancellation),
		running: make(map[string]*watch),
	}
	a, b, d, other := &watch{}, &watch{}, &watch{}, &watch{}
	c.track("t1", a)
	c.track("t1", b)
	c.track("t2", other)
	c.track("t1", d)
	if got, want := c.runningOf("t1"), []*watch{d, b, a}; !slices.Equal(got, want) {
		t.Fatalf("t1 runs %p, want %p", got, want)
	}
	c.untrack("t1", b) // the middle one
	if got, want := c.runningOf("t1"), []*watch{d, a}; !slices.Equal(got, want) {
		t.Fatalf("after removing the middle attempt, t1 runs %p, want %p", got, want)
	}
	c.untrack("t1", d) // the head
	if got, want := c.runningOf("t1"), []*watch{a}; !slices.Equal(got, want) {
		t.Fatalf("after removing the newest attempt, t1 runs %p, want %p", got, want)
	}
	c.untrack("t1", b) // gone already: nothing changes
	c.untrack("t1", a)
	if got := c.runningOf("t1"); len(got) != 0 {
		t.Fatalf("t1 still runs %p after every attempt ended", got)
	}
	if _, ok := c.running["t1"]; ok {
		t.Fatal("an ended task keeps an entry in the registry")
	}
	if got, want := c.runningOf("t2"), []*watch{other}; !slices.Equal(got, want) {
		t.Fatalf("t2 runs %p, want %p", got, want)
	}
}
