package consumer

// Wake-ups of idle lanes. A worker long-polls its idle lanes while its
// spare slots cover them all. A worker with more lanes than spare slots,
// one serving many types for example, instead watches each idle lane with
// a core subscription on the subjects its tasks are published on. The
// first task published there wakes the lane, and the dispatcher pulls it
// at once with a long-poll of one task, which waits for the task to be
// stored. The message a subscription receives is never run: JetStream
// stays the only source of the tasks. A watch is one-shot (the server
// ends it after one message), so a busy lane costs no copies, and it is
// set again once the lane is idle again. Tasks that reach a lane without a
// publish (a redelivery, a delayed task falling due) are found by the
// refresh, as before.

import (
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	spool "github.com/spoolq/spool/shared"
)

// waker holds the watches of the idle lanes. The dispatcher decides which
// lanes to watch under its lock (watchLocked) and arms them after it
// (arm); receive marks a lane woken when its watch fires.
type waker struct {
	nc  *nats.Conn
	log *slog.Logger
	// subjects are, per lane, the subjects its tasks are published on;
	// on is false when wake-ups are off: no lane has subjects, or the
	// connection may not subscribe to them.
	subjects [][]string
	on       bool
	ch       chan *nats.Msg
	done     chan struct{}
	// woke is called with a lane whose watch fired.
	woke func(lane int)

	// mu guards subs, armed and closed. A watch is recorded before its
	// first message can be looked up, since arm holds mu while it
	// subscribes.
	mu     sync.Mutex
	subs   map[*nats.Subscription]int
	armed  [][]*nats.Subscription // per lane
	closed bool
	failed bool // a failure to arm was logged
}

// newWaker makes the waker of lanes. It checks once that the connection
// may subscribe to their subjects: a role without the right gets a
// warning and the worker long-polls as it would without wake-ups.
func newWaker(nc *nats.Conn, log *slog.Logger, lanes []lane, timeout time.Duration, woke func(int)) *waker {
	w := &waker{nc: nc, log: log, woke: woke, done: make(chan struct{}), subs: map[*nats.Subscription]int{}}
	w.subjects = make([][]string, len(lanes))
	w.armed = make([][]*nats.Subscription, len(lanes))
	total := 0
	for i := range lanes {
		ln := &lanes[i] // stream and cons are fixed after Start
		cc := ln.cons.CachedInfo().Config
		w.subjects[i] = publishSubjects(ln.stream.CachedInfo().Config, append([]string{cc.FilterSubject}, cc.FilterSubjects...))
		total += len(w.subjects[i])
	}
	if total == 0 {
		return w
	}
	if probe := w.subjects[0]; len(probe) > 0 && !mayWatch(nc, probe[0], timeout) {
		log.Warn("this worker's connection may not subscribe to the task subjects: idle lanes beyond the spare slots are found by the refresh; allow it to subscribe to the subjects of its types for an immediate pickup",
			"subject", probe[0])
		return w
	}
	w.on = true
	// Every lane has one watch at most, of one message per subject.
	w.ch = make(chan *nats.Msg, total+len(lanes))
	go w.receive()
	return w
}

// mayWatch reports whether the connection may subscribe to subject: the
// server refuses a subscription it does not permit with an error that
// arrives before the answer to the flush.
func mayWatch(nc *nats.Conn, subject string, timeout time.Duration) bool {
	sub, err := nc.SubscribeSync(subject)
	if err != nil {
		return false
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := nc.FlushTimeout(timeout); err != nil {
		return true // unknown: the watches are tried, and the refresh still finds every task
	}
	err = nc.LastError()
	return !errors.Is(err, nats.ErrPermissionViolation) || !strings.Contains(err.Error(), `"`+subject+`"`)
}

// publishSubjects are the subjects a task that a consumer with filters
// pulls from stream s is published on: the filters themselves where the
// stream listens on them, and, through the stream's subject transform, the
// subjects the transform takes them from (a task partition's).
func publishSubjects(s jetstream.StreamConfig, filters []string) []string {
	var out []string
	add := func(subj string) {
		if !slices.Contains(out, subj) {
			out = append(out, subj)
		}
	}
	for _, f := range filters {
		if f == "" {
			continue
		}
		if slices.ContainsFunc(s.Subjects, func(subj string) bool { return spool.PatternCovers(subj, f) }) {
			add(f)
		}
		if tr := s.SubjectTransform; tr != nil {
			src, okSrc := strings.CutSuffix(tr.Source, ">")
			dst, okDst := strings.CutSuffix(tr.Destination, ">")
			if rest, ok := strings.CutPrefix(f, dst); ok && okSrc && okDst {
				add(src + rest)
			}
		}
	}
	return out
}

// arm sets a watch on each of lanes (the dispatcher marked them armed). A
// lane it cannot watch is handed to unarm, so the dispatcher may try
// again.
func (w *waker) arm(lanes []int, unarm func(lane int)) {
	if len(lanes) == 0 {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, lane := range lanes {
		if w.closed {
			unarm(lane)
			continue
		}
		if err := w.armLocked(lane); err != nil {
			w.unsubscribeLocked(lane, nil)
			unarm(lane)
			if !w.failed {
				w.failed = true
				w.log.Warn("watching an idle lane failed: it is found by the refresh", "subjects", w.subjects[lane], "error", err)
			}
		}
	}
}

func (w *waker) armLocked(lane int) error {
	for _, subj := range w.subjects[lane] {
		sub, err := w.nc.ChanSubscribe(subj, w.ch)
		if err != nil {
			return err
		}
		w.subs[sub] = lane
		w.armed[lane] = append(w.armed[lane], sub)
		if err := sub.AutoUnsubscribe(1); err != nil {
			return err
		}
	}
	return nil
}

// unsubscribeLocked ends the watches of a lane but keep, which fired.
// w.mu is held.
func (w *waker) unsubscribeLocked(lane int, keep *nats.Subscription) {
	for _, sub := range w.armed[lane] {
		delete(w.subs, sub)
		if sub != keep {
			_ = sub.Unsubscribe() // it ends with the connection anyway
		}
	}
	w.armed[lane] = w.armed[lane][:0]
}

// receive turns the messages of the watches into wake-ups until close.
func (w *waker) receive() {
	for {
		select {
		case <-w.done:
			return
		case m := <-w.ch:
			w.mu.Lock()
			lane, ok := w.subs[m.Sub]
			if ok {
				w.unsubscribeLocked(lane, m.Sub)
			}
			w.mu.Unlock()
			if ok {
				w.woke(lane)
			}
		}
	}
}

// close ends every watch and the receiving goroutine.
func (w *waker) close() {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return
	}
	w.closed = true
	for lane := range w.armed {
		w.unsubscribeLocked(lane, nil)
	}
	w.mu.Unlock()
	if w.on {
		close(w.done)
	}
}

// woke marks a lane woken by its watch and nudges the dispatcher.
func (d *dispatcher) woke(lane int) {
	d.mu.Lock()
	st := &d.lanes[lane].prioState
	st.armed = false
	if !st.retired {
		st.woken = true
	}
	d.mu.Unlock()
	d.nudge()
}

// unarm marks a lane unwatched after its watch could not be set.
func (d *dispatcher) unarm(lane int) {
	d.mu.Lock()
	d.lanes[lane].armed = false
	d.mu.Unlock()
}

// idleLocked counts the lanes a long-poll would go to: no request out, no
// known work, not resting. d.mu is held.
func (d *dispatcher) idleLocked(laneCaps []int, resting []bool) int {
	n := 0
	for i := range d.lanes {
		if !d.pl.outstanding(i) && laneCaps[i] == 0 && !resting[i] {
			n++
		}
	}
	return n
}

// watchLocked marks and returns the lanes to watch: wake-ups are on, and
// the lane has no request out, no known work, no watch yet, and is neither
// paused nor retired. d.mu is held.
func (d *dispatcher) watchLocked() []int {
	if !d.wk.on {
		return nil
	}
	var out []int
	for i := range d.lanes {
		st := &d.lanes[i].prioState
		if st.armed || st.woken || st.maybe || st.pending > 0 || st.paused || st.retired || d.pl.outstanding(i) || len(d.wk.subjects[i]) == 0 {
			continue
		}
		st.armed = true
		out = append(out, i)
	}
	return out
}

// pollWokenLocked long-polls the lanes woken by a publish and not known to
// have work otherwise, one task each, from the spare slots, the most
// urgent priorities first: the long-polls the watches stand in for. A
// long-poll waits for the task to be stored, which a fetch sent at once
// could miss. A woken lane left without a slot waits for one, and a
// refresh that finds its task makes it a lane with work. d.mu is held.
func (d *dispatcher) pollWokenLocked(plans []pullPlan, laneCaps []int, resting []bool) []pullPlan {
	for _, p := range spool.Priorities {
		for g := range d.groups {
			i := laneOf(g, p)
			st := &d.lanes[i]
			if !st.woken || laneCaps[i] > 0 || resting[i] || d.pl.outstanding(i) || d.roomLocked(i) == 0 {
				continue
			}
			if d.slots.spare() <= 0 {
				return plans
			}
			st.woken = false
			d.slots.reserve(1, true)
			plans = append(plans, d.pl.planLocked(i, 1, true))
		}
	}
	return plans
}
