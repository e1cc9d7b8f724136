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
// d.mu is held.
func (d *dispatcher) scaleUpLocked() {
	var backlog uint64
	for i := range d.lanes {
		backlog += d.lanes[i].pending
	}
	d.slots.grow(backlog, d.o.ScaleUpFill)
}

// scaleDown shrinks the pool to the slots used during the last
// ScaleDownIdle period.
func (d *dispatcher) scaleDown() {
	d.mu.Lock()
	from, to := d.slots.shrink(time.Now(), d.o.ScaleDownIdle)
	d.mu.Unlock()
	if to < from {
		d.log.Debug("scaling down", "from", from, "to", to)
	}
}
