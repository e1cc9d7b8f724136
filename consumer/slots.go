package consumer

import (
	"time"

	spool "github.com/spoolq/spool/shared"
)

// slots is the worker's pool of slots: how many there are (size, moved by
// autoscaling between min and max), how many run an attempt (busy), and
// how many outstanding pull requests hold in reserve for the tasks they
// may bring (fetching for no-wait fetches, polling for long-polls), in
// total, with the busy ones per priority. Which lane (a priority consumer
// of a partition) has which request out is the puller's.
//
// Invariants, whenever the worker's lock is free (check verifies them):
//
//   - busy, fetching, polling >= 0, and busy is the sum of the priorities'
//     busy;
//   - polling is the number of lanes with a long-poll out (a long-poll
//     reserves one slot);
//   - busy + fetching + polling <= max: a pulled task always finds a slot;
//   - min <= size <= max, and busy <= size: the pool grows to fit the
//     busy slots (a long-poll's task may take a slot beyond size) and never
//     shrinks below them;
//   - highWater >= busy: the most slots busy since windowFrom.
//
// It does no locking: the worker's mutex guards it.
type slots struct {
	min, max int

	size     int                // current slot count
	busy     int                // slots running an attempt
	fetching int                // slots reserved by no-wait fetches in flight
	polling  int                // slots reserved by long-polls in flight
	prio     [numPriorities]int // busy slots per priority

	scaleUps   uint64
	scaleDowns uint64
	highWater  int       // most busy slots since windowFrom
	windowFrom time.Time // start of the current scale-down window
}

func newSlots(minSize, maxSize int) slots {
	return slots{min: minSize, max: maxSize, size: minSize}
}

// reserve holds n slots for a pull request: a long-poll when poll (n is
// then 1), else a no-wait fetch.
func (s *slots) reserve(n int, poll bool) {
	if poll {
		s.polling += n
	} else {
		s.fetching += n
	}
}

// arrive gives back the reservation of one task a request brought (the
// task then takes a slot with take, or is handed back).
func (s *slots) arrive(poll bool) { s.unreserve(poll, 1) }

// end ends a request, giving back the left slots it still reserved.
func (s *slots) end(poll bool, left int) { s.unreserve(poll, left) }

func (s *slots) unreserve(poll bool, n int) {
	if poll {
		s.polling -= n
	} else {
		s.fetching -= n
	}
}

// take gives a slot to an attempt of p, growing the pool when every slot
// was busy (a long-poll's task).
func (s *slots) take(p spool.Priority) {
	s.busy++
	s.prio[p]++
	if s.busy > s.size {
		s.size = min(s.busy, s.max)
		s.scaleUps++
	}
	s.highWater = max(s.highWater, s.busy)
}

// release frees the slot of a finished attempt of p, and reports whether
// no-wait fetches are in flight.
func (s *slots) release(p spool.Priority) (fetching bool) {
	s.busy--
	s.prio[p]--
	return s.fetching > 0
}

// free is the slots a round of no-wait fetches may reserve: the pool's
// slots not busy, within what the long-polls leave of max.
func (s *slots) free() int { return min(s.size, s.max-s.polling) - s.busy }

// spare is the slots of max neither busy nor reserved: what long-polls
// may reserve.
func (s *slots) spare() int { return s.max - s.busy - s.fetching - s.polling }

// idle is the pool's slots not busy.
func (s *slots) idle() int { return max(0, s.size-s.busy) }

// grow adds slots, one at a time up to max, while the busy and fetching
// slots fill at least fill of the pool and the backlog is more than the
// slots left.
func (s *slots) grow(backlog uint64, fill float64) {
	for s.size < s.max {
		used := s.busy + s.fetching
		if float64(used) < fill*float64(s.size) || backlog <= uint64(max(0, s.size-used)) {
			return
		}
		s.size++
		s.scaleUps++
	}
}

// startWindow starts the first scale-down window at now.
func (s *slots) startWindow(now time.Time) { s.windowFrom = now }

// shrink, once a window of idle has passed since the last, shrinks the
// pool to the most slots busy during it (at least min, never below the
// busy ones) and starts the next window. It returns the size before and
// after; from == to when nothing changed.
func (s *slots) shrink(now time.Time, idle time.Duration) (from, to int) {
	from = s.size
	if now.Sub(s.windowFrom) < idle {
		return from, from
	}
	if target := max(s.min, s.highWater, s.busy); target < s.size {
		s.size = target
		s.scaleDowns++
	}
	s.windowFrom = now
	s.highWater = s.busy
	return from, s.size
}
