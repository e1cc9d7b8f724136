package consumer

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	spool "github.com/spoolq/spool/shared"
)

// pullErrorPause is how long a priority rests after a failed pull, so an
// unreachable server or a deleted consumer does not turn pulling into a
// busy loop.
const pullErrorPause = 500 * time.Millisecond

// pullAnswerWait is how long a pull request may go without an answer
// before its slots are given back: the server answers a no-wait request at
// once and a long-poll when it expires, so silence means the request or
// its answer was lost (a reconnect). Tasks that still arrive for it are
// handed back at once.
const pullAnswerWait = 2 * time.Second

// puller sends the worker's pull requests and receives what they bring on
// one wildcard subscription that lives as long as the worker: a request's
// reply subject is <inbox>.<priority>.<request>. Compared with a fetch per
// pull (which subscribes and unsubscribes every time), a pull costs one
// published request.
//
// Each priority has at most one request outstanding (dispatch plans a
// no-wait fetch or a long-poll for a priority, never both); its slots are
// reserved until it ends. A request ends when it has brought every task it
// asked for, or with a status from the server (404 no messages, 408
// expired, 409 and others: failures), or after pullAnswerWait without an
// answer.
type puller struct {
	w      *Worker
	prefix string // reply subjects: prefix + priority + "." + request
	sub    *nats.Subscription
	next   [numPriorities]string // $JS.API.CONSUMER.MSG.NEXT.<stream>.<consumer>
	cons   [numPriorities]string // consumer names, to know a pulled task's priority

	// Guarded by w.mu.
	seq uint64
	req [numPriorities]pullRequest
}

// pullRequest is the outstanding request of a priority; id 0 means none.
type pullRequest struct {
	id       uint64
	want     int
	got      int
	poll     bool
	sent     time.Time
	deadline time.Time
}

// pullPlan is a request dispatch decided on, sent once w.mu is released.
type pullPlan struct {
	p    spool.Priority
	id   uint64
	body []byte
}

func newPuller(w *Worker) (*puller, error) {
	pl := &puller{w: w, prefix: w.nc.NewInbox() + "."}
	for _, p := range spool.Priorities {
		pl.cons[p] = w.o.Names.Consumer(p)
		pl.next[p] = "$JS.API.CONSUMER.MSG.NEXT." + w.o.Names.TaskStream() + "." + pl.cons[p]
	}
	sub, err := subscribeUnbounded(w.nc, pl.prefix+"*.*", pl.onMsg)
	if err != nil {
		return nil, fmt.Errorf("subscribing to pulled tasks: %w", err)
	}
	pl.sub = sub
	return pl, nil
}

// planLocked records a request of n tasks of p (a long-poll when poll) and
// returns it for sending. w.mu is held.
func (pl *puller) planLocked(p spool.Priority, n int, poll bool) pullPlan {
	pl.seq++
	wait := pullAnswerWait
	var body []byte
	if poll {
		wait += pl.w.o.PollWait
		body = fmt.Appendf(nil, `{"batch":1,"expires":%d}`, pl.w.o.PollWait.Nanoseconds())
	} else {
		body = fmt.Appendf(nil, `{"batch":%d,"no_wait":true}`, n)
	}
	now := time.Now()
	pl.req[p] = pullRequest{id: pl.seq, want: n, poll: poll, sent: now, deadline: now.Add(wait)}
	pl.w.pulls.Add(1)
	return pullPlan{p: p, id: pl.seq, body: body}
}

// send publishes planned requests; one that cannot be sent ends at once.
func (pl *puller) send(plans []pullPlan) {
	for _, r := range plans {
		reply := pl.prefix + strconv.Itoa(int(r.p)) + "." + strconv.FormatUint(r.id, 36)
		if err := pl.w.nc.PublishRequest(pl.next[r.p], reply, r.body); err != nil {
			pl.w.mu.Lock()
			ended := pl.endLocked(r.p, r.id, true)
			pl.w.mu.Unlock()
			if ended {
				pl.w.pullFailed(r.p, err)
			}
		}
	}
}

// onMsg handles what a pull request brings: a task or a status that ends
// the request. A status comes on the request's reply subject; a task keeps
// its own subject and is known by its consumer (from the ack subject).
// With one request per priority at a time, a task belongs to the
// priority's current request; one beyond what that request reserved slots
// for (a late arrival for an abandoned request) is handed back at once.
func (pl *puller) onMsg(m *nats.Msg) {
	w := pl.w
	if m.Reply == "" {
		pl.onStatus(m)
		return
	}
	msg := &pulledMsg{m: m}
	md, err := msg.Metadata()
	if err != nil {
		w.log.Warn("pulled a message without JetStream metadata", "subject", m.Subject, "error", err)
		return
	}
	p, ok := pl.priority(md.Consumer)
	if !ok {
		w.log.Warn("pulled a task of an unknown consumer", "consumer", md.Consumer, "subject", m.Subject)
		return
	}
	w.mu.Lock()
	r := &pl.req[p]
	if r.id == 0 || r.got >= r.want {
		w.mu.Unlock()
		if err := m.Nak(); err != nil {
			w.log.Warn("handing back a task of an abandoned pull", "priority", p.String(), "error", err)
		}
		return
	}
	r.got++
	w.reservedLocked(p, r.poll, -1)
	done := r.got >= r.want
	if done {
		w.prio[p].pending = md.NumPending
		pl.endLocked(p, r.id, false)
	}
	start := w.takeSlotLocked(p)
	w.mu.Unlock()
	if done {
		w.nudge()
	}
	if !start {
		if err := m.Nak(); err != nil {
			w.log.Warn("handing back a task pulled during shutdown", "priority", p.String(), "error", err)
		}
		return
	}
	w.startAttempt(p, msg)
}

// onStatus ends the request a status answers: 404 (no tasks now) and 408
// (a long-poll expired) are normal ends; anything else is a failed pull.
func (pl *puller) onStatus(m *nats.Msg) {
	p, id, ok := pl.parseReply(m.Subject)
	if !ok {
		return
	}
	w := pl.w
	status, desc := m.Header.Get("Status"), m.Header.Get("Description")
	failed := status != "404" && status != "408"
	w.mu.Lock()
	ended := pl.endLocked(p, id, failed)
	w.mu.Unlock()
	if !ended {
		return // an abandoned request's
	}
	w.nudge()
	if failed {
		w.pullFailed(p, fmt.Errorf("pull request answered with status %s %s", status, desc))
	}
}

// priority is the priority whose consumer is named consumer.
func (pl *puller) priority(consumer string) (spool.Priority, bool) {
	for _, p := range spool.Priorities {
		if pl.cons[p] == consumer {
			return p, true
		}
	}
	return 0, false
}

// endLocked ends request id of p, giving back the slots it still holds;
// false when it had ended already. A no-wait fetch that ends short of what
// it asked for without failing means the priority is empty now. w.mu is
// held.
func (pl *puller) endLocked(p spool.Priority, id uint64, failed bool) bool {
	r := &pl.req[p]
	if r.id != id || id == 0 {
		return false
	}
	w := pl.w
	if left := r.want - r.got; left > 0 {
		w.reservedLocked(p, r.poll, -left)
		if !r.poll && !failed {
			w.prio[p].pending, w.prio[p].maybe = 0, false
		}
	}
	if r.poll {
		w.prio[p].polling = false
	} else {
		w.prio[p].fetches--
	}
	*r = pullRequest{}
	w.pulls.Done()
	return true
}

// expire ends requests that went unanswered past their deadline, or every
// outstanding request when all is true (shutdown). It reports whether any
// ended.
func (pl *puller) expire(all bool) bool {
	now := time.Now()
	w := pl.w
	w.mu.Lock()
	ended := false
	for _, p := range spool.Priorities {
		r := pl.req[p]
		if r.id != 0 && (all || now.After(r.deadline)) {
			if !all {
				w.log.Warn("pull request unanswered; giving its slots back", "priority", p.String(), "waited", now.Sub(r.sent).Round(time.Millisecond))
			}
			ended = pl.endLocked(p, r.id, true) || ended
		}
	}
	w.mu.Unlock()
	return ended
}

func (pl *puller) close() {
	if err := pl.sub.Unsubscribe(); err != nil && !errors.Is(err, nats.ErrConnectionClosed) {
		pl.w.log.Warn("unsubscribing from pulled tasks", "error", err)
	}
}

// parseReply reads the priority and request of a reply subject.
func (pl *puller) parseReply(subject string) (spool.Priority, uint64, bool) {
	rest, ok := strings.CutPrefix(subject, pl.prefix)
	if !ok {
		return 0, 0, false
	}
	ps, ids, ok := strings.Cut(rest, ".")
	if !ok {
		return 0, 0, false
	}
	pi, err := strconv.Atoi(ps)
	if err != nil || pi < 0 || pi >= numPriorities {
		return 0, 0, false
	}
	id, err := strconv.ParseUint(ids, 36, 64)
	if err != nil {
		return 0, 0, false
	}
	return spool.Priority(pi), id, true
}

// reservedLocked adds d to the slots reserved by p's request. w.mu is held.
func (w *Worker) reservedLocked(p spool.Priority, poll bool, d int) {
	if poll {
		w.polling += d
	} else {
		w.fetching += d
	}
}

// takeSlotLocked takes a slot for a pulled task of p; false once Stop was
// called (the task is to be handed back). w.mu is held.
func (w *Worker) takeSlotLocked(p spool.Priority) bool {
	if w.isStopping() {
		return false
	}
	w.busy++
	w.prio[p].busy++
	w.noteBusyLocked()
	w.attempts.Add(1)
	return true
}

// pullFailed logs a failed pull and rests the priority for
// pullErrorPause.
func (w *Worker) pullFailed(p spool.Priority, err error) {
	if w.isStopping() && errors.Is(err, nats.ErrConnectionClosed) {
		return
	}
	w.log.Warn("pull failed", "priority", p.String(), "error", err)
	w.mu.Lock()
	w.prio[p].restUntil = time.Now().Add(pullErrorPause)
	w.mu.Unlock()
}

// job is a pulled task waiting for a runner.
type job struct {
	p   spool.Priority
	msg jetstream.Msg
}

// startAttempt runs an attempt on an idle runner goroutine, or on a new
// one when none is idle. Runners outlive their attempts: a fresh goroutine
// grows its stack on every task (copying it a few times), which was a
// tenth of the worker's CPU with fast handlers. There are never more
// runners than attempts have run at once (at most MaxConcurrency); they
// end at Stop.
func (w *Worker) startAttempt(p spool.Priority, m jetstream.Msg) {
	select {
	case w.runq <- job{p: p, msg: m}:
	default:
		w.runners.Add(1)
		go w.runner(job{p: p, msg: m})
	}
}

func (w *Worker) runner(j job) {
	defer w.runners.Done()
	for {
		w.attempt(j.p, j.msg)
		select {
		case j = <-w.runq:
		case <-w.stopping:
			return
		}
	}
}

// release frees the slot of a finished attempt. While fetches are in
// flight the dispatcher would plan nothing before they return (and each
// nudges it then), so it is left asleep.
func (w *Worker) release(p spool.Priority) {
	w.mu.Lock()
	w.busy--
	w.prio[p].busy--
	fetching := w.fetching > 0
	w.mu.Unlock()
	if !fetching {
		w.nudge()
	}
}
