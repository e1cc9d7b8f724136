package flow

import (
	"slices"
	"time"
)

// A line holds the tasks for the starts of the next lineSpan (handed-back
// tasks come back that early, and the server fires schedules in clumps
// about that far apart), at least minLine and at most maxLine: the next
// ones are handed back at once. A worker killed while its tasks wait
// holds them until AckWait, so no more wait than the line can use.
const (
	lineSpan = 300 * time.Millisecond
	minLine  = 4
	maxLine  = 64
)

// lineCap is the most tasks in the line of a rate of interval iv.
func lineCap(iv time.Duration) int {
	return min(maxLine, max(minLine, int(lineSpan/max(iv, 1))+1))
}

// A waiter is a task in the line of a rate key: turn is closed when it
// reaches the head, or when the head reserved a start for it (until).
type waiter struct {
	turn  chan struct{}
	until time.Time // the last moment of the start reserved for it
	// out: it left the line with a reserved start, and counts in
	// Limiter.reserved until it returns; gone: it left without one.
	out, gone bool
}

// joinLine puts a task at the end of the line of rate key rk; its turn
// is closed at once when ahead is 0. It returns nil when the line is full
// (most tasks in it or sleeping on a reserved start).
func (l *Limiter) joinLine(rk string, most int) (w *waiter, ahead int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	line := l.lines[rk]
	if len(line)+l.reserved[rk] >= most {
		return nil, len(line)
	}
	w = &waiter{turn: make(chan struct{})}
	if len(line) == 0 {
		close(w.turn)
	}
	l.lines[rk] = append(line, w)
	return w, len(line)
}

// handOutLocked gives the n starts written from tat on to the head w
// (unless its start is now, and it is going) and the n−1 tasks behind
// it, which leave the line and count in l.reserved until they return;
// the next task becomes the head. Fewer tasks than n left in the line
// (one gave up meanwhile) leave the last starts unused.
func (l *Limiter) handOutLocked(rk string, w *waiter, tat time.Time, iv time.Duration, n int, now bool) {
	line := l.lines[rk]
	if len(line) == 0 || line[0] != w {
		// A task that left the line and woke too late for its start
		// reserves one for itself.
		if !now {
			w.until = tat
		}
		return
	}
	n = min(n, len(line))
	for k, o := range line[:n] {
		if k == 0 && now {
			continue
		}
		o.until, o.out = tat.Add(time.Duration(k)*iv), true
		l.reserved[rk]++
		if k > 0 {
			close(o.turn)
		}
	}
	if now {
		w.gone = true
	}
	l.setLineLocked(rk, line[n:])
}

// reservedFor returns the last moment of the start reserved for w (zero:
// none).
func (l *Limiter) reservedFor(w *waiter) time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return w.until
}

// giveUp takes w out of the line of rk when it is not at the head and no
// start was reserved for it (true), so that it can be handed back.
func (l *Limiter) giveUp(rk string, w *waiter) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	line := l.lines[rk]
	i := slices.Index(line, w)
	if i <= 0 {
		return false
	}
	w.gone = true
	l.setLineLocked(rk, slices.Delete(line, i, i+1))
	return true
}

// leaveLine ends w's time in the line of rk as its task returns: out of
// the line (handing the head on when it was the head), or out of the
// count of reserved starts.
func (l *Limiter) leaveLine(rk string, w *waiter) {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case w.gone:
	case w.out:
		if l.reserved[rk]--; l.reserved[rk] <= 0 {
			delete(l.reserved, rk)
		}
	default:
		line := l.lines[rk]
		if i := slices.Index(line, w); i >= 0 {
			l.setLineLocked(rk, slices.Delete(line, i, i+1))
		}
	}
	w.gone = true
}

// setLineLocked stores the line of rk (the head's turn closed).
func (l *Limiter) setLineLocked(rk string, line []*waiter) {
	if len(line) == 0 {
		delete(l.lines, rk)
		return
	}
	if h := line[0]; !h.out {
		select {
		case <-h.turn:
		default:
			close(h.turn)
		}
	}
	l.lines[rk] = line
}
