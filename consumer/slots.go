package consumer

import (
	"time"

	spool "github.com/spoolq/spool/shared"
)

// slots is the worker's pool of slots: how many there are (size, moved by
// autoscaling between min and max), how many run an attempt (busy), how
// many outstanding pull requests hold in reserve for the tasks they may
// bring (fetching for no-wait fetches, polling for long-polls), in total,
// with the busy ones per priority, and how many pulled tasks wait for a
// slot (queued). Which lane (a priority consumer of a partition) has
// which request out is the puller's.
//
// No-wait fetches pull ahead: they may ask for up to ahead tasks more than
// the idle slots, so that the slots freeing during the fetch's round trip
// find a task waiting instead of waiting for the next pull; such a task
// waits in the worker's queue (see Worker.release) and takes the next slot
// that frees. ahead is what the slots free during one round trip at the
// pace of recent attempts (see aheadFor): about none for tasks that run
// much longer than a round trip, so they are never pulled early.
//
// Invariants, whenever the worker's lock is free (check verifies them):
//
//   - busy, fetching, polling, queued >= 0, and busy is the sum of the
//     priorities' busy;
//   - polling is the number of lanes with a long-poll out (a long-poll
//     reserves one slot);
//   - 0 <= ahead <= maxAhead(max), and busy + queued + fetching +
//     polling <= max + maxAhead(max): a pulled task always finds a slot
//     or a place in the queue, and at most maxAhead(max) tasks are pulled
//     ahead;
//   - queued > 0 only while every slot is busy (busy >= size): a slot
//     that frees goes to a queued task first;
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
	queued   int                // pulled tasks waiting for a slot
	ahead    int                // tasks a round of fetches may pull beyond the idle slots
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
// task then takes a slot with take, waits with enqueue, or is handed
// back).
func (s *slots) arrive(poll bool) { s.unreserve(poll, 1) }

// runnable reports whether a task that arrived takes a slot at once: a
// long-poll's task always does (it reserved one out of max), a fetched one
// when a slot is idle; any other waits in the queue.
func (s *slots) runnable(poll bool) bool { return poll || s.busy < s.size }

// enqueue counts a pulled task waiting for a slot.
func (s *slots) enqueue() { s.queued++ }

// handOver passes the slot of a finished attempt of p to a queued task of
// q.
func (s *slots) handOver(p, q spool.Priority) {
	s.prio[p]--
	s.prio[q]++
	s.queued--
}

// dequeue gives an idle slot to a queued task of p (the pool grew).
func (s *slots) dequeue(p spool.Priority) {
	s.queued--
	s.take(p)
}

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

// free is the tasks a round of no-wait fetches may ask for: the pool's
// slots not busy, within what the long-polls leave of max, plus ahead,
// less the tasks queued already.
func (s *slots) free() int { return min(s.size, s.max-s.polling) - s.busy + s.ahead - s.queued }

// spare is the slots of max neither busy, nor reserved, nor promised to a
// queued task: what long-polls may reserve.
func (s *slots) spare() int { return s.max - s.busy - s.queued - s.fetching - s.polling }

// aheadFor is how many tasks fetches pull beyond the idle slots of a pool
// of size slots: the attempts that end during one pull round trip (rtt)
// when each takes run (from pulled to its slot freed), at most most; 0
// until both are known, and about 0 when attempts take much longer than a
// round trip.
func aheadFor(size, most int, rtt, run time.Duration) int {
	if rtt <= 0 || run <= 0 {
		return 0
	}
	return int(min(int64(most), int64(size)*int64(rtt)/int64(run)))
}

// aheadCap is the most tasks a pool of maxSlots slots pulls ahead when
// the priorities with known work are those whose caps are not 0: as many
// as its slots, and maxAhead when one priority alone has work. A round
// pulls each priority its share, the priorities' tasks arriving a batch
// after another: in a deeper queue, a short window of starts would show
// one priority's batch rather than the weights.
func aheadCap(maxSlots int, caps [numPriorities]int) int {
	with := 0
	for _, c := range caps {
		if c > 0 {
			with++
		}
	}
	if with > 1 {
		return maxSlots
	}
	return maxAhead(maxSlots)
}

// maxAhead is the most tasks a pool of maxSlots slots pulls ahead: as
// many as its slots, and at least minAhead.
func maxAhead(maxSlots int) int { return max(maxSlots, minAhead) }

// minAhead lets a small pool of slots running short tasks of one priority
// pull ahead more than its slots: the tasks one round trip frees would
// otherwise come in pulls of a few tasks each, every pull, burst of
// result writes and burst of acks a network write of its own on the
// worker and a read on the server.
const minAhead = 64

// idle is the pool's slots not busy.
func (s *slots) idle() int { return max(0, s.size-s.busy) }

// grow adds slots, one at a time up to max, while the busy and fetching
// slots fill at least fill of the pool and the backlog is more than the
// slots left.
func (s *slots) grow(backlog uint64, fill float64) {
	for s.size < s.max {
		// The tasks fetched or queued beyond the idle slots (pulled
		// ahead) count as used: they are demand waiting for slots.
		used := s.busy + s.queued + s.fetching - s.ahead
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
