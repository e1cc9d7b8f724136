package workflow

import (
	"context"
	"sync"
)

// Group commit of workflow record changes. Every finishing step changes
// its workflow's record, one key: when many steps of one workflow finish
// at once in one process (the members of a large group), one compare-and-
// set per step would mostly lose and retry. Instead the changes queue up
// per workflow, and whoever finds the record free applies every queued
// change in one compare-and-set and hands the stored record to each.
// Each change still decides from the record it is applied to, so the
// result is the same as applying them one by one.

// recordBatch queues the changes of one workflow's record.
type recordBatch struct {
	commit sync.Mutex // held by the goroutine writing a batch

	mu    sync.Mutex
	queue []*recordChange
}

type recordChange struct {
	fn   func(r *Record) bool
	done chan struct{}
	rec  *Record
	err  error
}

// changeRecord is modifyRecord through the workflow's group commit. The
// returned record is shared with the other changes of the batch: read it,
// do not change it.
func (s *Store) changeRecord(ctx context.Context, id string, fn func(r *Record) bool) (*Record, error) {
	v, _ := s.batches.LoadOrStore(id, &recordBatch{})
	b := v.(*recordBatch)
	c := &recordChange{fn: fn, done: make(chan struct{})}
	b.mu.Lock()
	b.queue = append(b.queue, c)
	b.mu.Unlock()

	b.commit.Lock()
	defer b.commit.Unlock()
	select {
	case <-c.done: // a previous holder wrote it
		return c.rec, c.err
	default:
	}
	b.mu.Lock()
	batch := b.queue
	b.queue = nil
	b.mu.Unlock()
	rec, err := s.modifyRecord(ctx, id, func(r *Record) bool {
		changed := false
		for _, x := range batch {
			if x.fn(r) {
				changed = true
			}
		}
		return changed
	})
	for _, x := range batch {
		x.rec, x.err = rec, err
		close(x.done)
	}
	b.mu.Lock()
	if len(b.queue) == 0 {
		s.batches.CompareAndDelete(id, b)
	}
	b.mu.Unlock()
	return c.rec, c.err
}
