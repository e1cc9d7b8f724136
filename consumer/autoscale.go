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
	for _, st := range w.prio {
		backlog += st.pending
	}
	for w.size < w.o.MaxConcurrency {
		used := w.busy + w.fetching
		if float64(used) < w.o.ScaleUpFill*float64(w.size) || backlog <= uint64(max(0, w.size-used)) {
			return
		}
		w.size++
		w.scaleUps++
	}
}

// noteBusyLocked records a slot taken; w.mu is held.
func (w *Worker) noteBusyLocked() {
	if w.busy > w.size {
		w.size = min(w.busy, w.o.MaxConcurrency)
		w.scaleUps++
	}
	w.highWater = max(w.highWater, w.busy)
}

// scaleDown shrinks the pool to the slots used during the last
// ScaleDownIdle period.
func (w *Worker) scaleDown() {
	w.mu.Lock()
	defer w.mu.Unlock()
	now := time.Now()
	if now.Sub(w.windowFrom) < w.o.ScaleDownIdle {
		return
	}
	target := max(w.o.MinConcurrency, w.highWater, w.busy)
	if target < w.size {
		w.log.Debug("scaling down", "from", w.size, "to", target)
		w.size = target
		w.scaleDowns++
	}
	w.windowFrom = now
	w.highWater = w.busy
}
