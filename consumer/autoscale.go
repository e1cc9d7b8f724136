package consumer

import "time"

// Autoscaling moves the slot count between MinConcurrency and
// MaxConcurrency without touching running tasks:
//
//   - up, one slot per dispatch, while the busy (and reserved) slots fill at
//     least ScaleUpFill of the pool and more tasks wait than slots are free;
//     also when a long-poll brings a task while every slot is busy (the poll
//     had reserved a slot out of MaxConcurrency);
//   - down, once every ScaleDownIdle, to the most slots busy during that
//     period (at least MinConcurrency): slots nobody used for a whole period
//     go away. Running tasks are never interrupted, since the pool never
//     shrinks below the slots in use.

// scaleUpLocked grows the pool while the backlog outgrows the busy slots.
// w.mu is held.
func (w *Worker) scaleUpLocked() {
	var backlog uint64
	for i := range w.lanes {
		backlog += w.lanes[i].pending
	}
	w.slots.grow(backlog, w.o.ScaleUpFill)
}

// scaleDown shrinks the pool to the slots used during the last
// ScaleDownIdle period.
func (w *Worker) scaleDown() {
	w.mu.Lock()
	from, to := w.slots.shrink(time.Now(), w.o.ScaleDownIdle)
	w.mu.Unlock()
	if to < from {
		w.log.Debug("scaling down", "from", from, "to", to)
	}
}
