package flow

import (
	"slices"
	"time"

	"github.com/spoolq/spool/shared/limits"
)

// A line holds the tasks for the starts of the next lineSpan (handed-back
// tasks come back that early, and the server fires schedules in clumps
// about that far apart), at least minLine and at most maxLine. A worker
// killed while its tasks wait holds them until AckWait, and the starts
// written ahead for them are lost, so no more wait than the line can use.
// Where the worker stops pulling a type while its line is full
// (HoldTypes), a task that arrives anyway waits in the line; elsewhere
// it is handed back.
const (
	lineSpan = 300 * time.Millisecond
	minLine  = 4
	maxLine  = 1024 // the worker's slots bound it (Hold)
)

// MaxHold is the longest a task of a type in Hold's types waits in its
// worker for its type-wide rate's start before it is handed back, and
// shortWait that of any other task: a task pulled while its line was
// full is better handed back soon, since a killed worker holds it until
// AckWait, but one whose type is no longer pulled has no way back but
// the line. A task waits longer than the line's span only when other
// workers take most starts; the caller heartbeats it meanwhile so that it
// is not delivered again.
const (
	MaxHold   = 5 * time.Second
	shortWait = 600 * time.Millisecond
)

// holdFor is how long a task of rate key (typ, key) may wait in its line.
func (l *Limiter) holdFor(typ, key string) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	if key == "" && l.holdTypes[typ] {
		return MaxHold
	}
	return shortWait
}

// lineCap is the most tasks in the line of a rate of interval iv.
func lineCap(iv time.Duration) int {
	return min(maxLine, max(minLine, int(lineSpan/max(iv, 1))+1))
}

// Hold bounds the tasks waiting in one line of this worker to most (0:
// only the line's span bounds them; the worker passes a share of its
// slots, since a waiting task holds one), and names the types whose pulls
// this worker stops while their type-wide rate line is full (RateRoom):
// their tasks that find the line full wait in it rather than being handed
// back, since pulling them stops. The worker calls it before any task
// arrives.
func (l *Limiter) Hold(most int, types []string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lineMost = most
	l.holdTypes = make(map[string]bool, len(types))
	for _, t := range types {
		l.holdTypes[t] = true
	}
}

// RateRoom says how many more tasks of typ the line of its type-wide rate
// limit takes in this worker (0 while the line is more than three
// quarters full), and false when typ has no such limit.
func (l *Limiter) RateRoom(typ string) (room int, limited bool) {
	rule, ok := l.Rule(typ)
	if !ok || rule.Rate == nil {
		return 0, false
	}
	iv, _ := rule.Rate.GCRA()
	rk := limits.RateKey(typ, "")
	l.mu.Lock()
	defer l.mu.Unlock()
	most := l.lineCapLocked(iv)
	used := len(l.lines[rk]) + l.reserved[rk]
	if room = max(0, most-used); used > 0 && room < (most+3)/4 {
		// A line still three quarters full waits: pulled in batches of a
		// quarter or more, its tasks cost a pull request per batch, not
		// one per start.
		room = 0
	}
	return room, true
}

// lineCapLocked is the most tasks in this worker's line of a rate of
// interval iv.
func (l *Limiter) lineCapLocked(iv time.Duration) int {
	n := lineCap(iv)
	if l.lineMost > 0 {
		n = max(1, min(n, l.lineMost))
	}
	return n
}

// A waiter is a task in the line of a rate key: turn is closed when it
// reaches the head, or when the head reserved a start for it (until).
type waiter struct {
	turn chan struct{}
	// from and until are the first and last moments of the start
	// reserved for it (zero: none).
	from, until time.Time
	// out: it left the line with a reserved start, and counts in
	// Limiter.reserved until it returns; gone: it left without one.
	out, gone bool
}

// joinLine puts a task at the end of the line of rate key rk; its turn
// is closed at once when ahead is 0. It returns nil when the line is full
// (most tasks in it or sleeping on a reserved start), unless the line is
// of a type-wide rate of a type in holdTypes (typ, key "").
func (l *Limiter) joinLine(rk, typ, key string, iv time.Duration) (w *waiter, ahead int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	line := l.lines[rk]
	if len(line)+l.reserved[rk] >= l.lineCapLocked(iv) && (key != "" || !l.holdTypes[typ]) {
		return nil, len(line)
	}
	w = &waiter{turn: make(chan struct{})}
	if len(line) == 0 {
		close(w.turn)
	}
	l.lines[rk] = append(line, w)
	return w, len(line)
}

// handOutLocked gives the n starts written from tat on, in groups of
// group that start together, to the head w (unless its start is now, and
// it is going) and the n−1 tasks behind it, which leave the line and
// count in l.reserved until they return; the next task becomes the head.
// Fewer tasks than n left in the line (one gave up meanwhile) leave the
// last starts unused.
func (l *Limiter) handOutLocked(rk string, w *waiter, tat time.Time, iv, tol time.Duration, n, group int, now bool) {
	line := l.lines[rk]
	if len(line) == 0 || line[0] != w {
		// A task that left the line and woke too late for its start
		// reserves one for itself.
		if !now {
			w.from, w.until = tat.Add(-tol), tat
		}
		return
	}
	n = min(n, len(line))
	for k, o := range line[:n] {
		if k == 0 && now {
			continue
		}
		// Each group of the starts goes together, once the last of its
		// starts is allowed.
		last := min((k/group+1)*group, n) - 1
		from := tat.Add(time.Duration(last)*iv - tol)
		o.from, o.until, o.out = from, tat.Add(time.Duration(k)*iv), true
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

// reservedFor returns the first and last moments of the start reserved
// for w (zero: none).
func (l *Limiter) reservedFor(w *waiter) (from, until time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return w.from, w.until
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
