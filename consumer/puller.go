package consumer

import (
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	spool "github.com/spoolq/spool/shared"
	"github.com/spoolq/spool/shared/jsproto"
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

// pullEvents is what the puller tells the worker, and asks of it.
type pullEvents interface {
	// pendingLocked records p's backlog as a fulfilled request saw it.
	pendingLocked(p spool.Priority, pending uint64)
	// emptyLocked records that p has no task now (a no-wait request ended
	// short of what it asked for).
	emptyLocked(p spool.Priority)
	// admitLocked counts an attempt about to start; false once the worker
	// stops (the task is to be handed back).
	admitLocked() bool
	// startAttempt runs an admitted attempt of a pulled task.
	startAttempt(p spool.Priority, m jetstream.Msg)
	// pullFailed rests p after a failed pull.
	pullFailed(p spool.Priority, err error)
	// nudge wakes the dispatcher: a request ended.
	nudge()
}

var _ pullEvents = (*Worker)(nil)

// puller sends the worker's pull requests and receives what they bring on
// one wildcard subscription that lives as long as the worker: a request's
// reply subject is <inbox>.<priority>.<request>. Compared with a fetch per
// pull (which subscribes and unsubscribes every time), a pull costs one
// published request.
//
// Each priority has at most one request outstanding (dispatch plans a
// no-wait fetch or a long-poll for a priority, never both); its slots are
// reserved until it ends. A request ends when it has brought every task it
// asked for, or with a status from the server (see jsproto.CheckStatus:
// 404 no messages and 408 expired end it normally, 100 heartbeats are
// ignored, and every other status fails it), or after pullAnswerWait
// without an answer.
type puller struct {
	nc       *nats.Conn
	log      *slog.Logger
	pollWait time.Duration
	ev       pullEvents
	prefix   string // reply subjects: prefix + priority + "." + request
	sub      *nats.Subscription
	next     [numPriorities]string // $JS.API.CONSUMER.MSG.NEXT.<stream>.<consumer>
	cons     [numPriorities]string // consumer names, to know a pulled task's priority

	// mu (the worker's) guards slots, seq, req and what the events'
	// Locked methods touch; pulls counts outstanding requests.
	mu    *sync.Mutex
	slots *slots
	pulls *sync.WaitGroup
	seq   uint64
	req   [numPriorities]pullRequest
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

// pullPlan is a request dispatch decided on, sent once mu is released.
type pullPlan struct {
	p    spool.Priority
	id   uint64
	body []byte
}

func newPuller(w *Worker) (*puller, error) {
	pl := &puller{
		nc:       w.nc,
		log:      w.log,
		pollWait: w.o.PollWait,
		ev:       w,
		prefix:   w.nc.NewInbox() + ".",
		mu:       &w.mu,
		slots:    &w.slots,
		pulls:    &w.pulls,
	}
	for _, p := range spool.Priorities {
		pl.cons[p] = w.o.Names.Consumer(p)
		pl.next[p] = jsproto.NextSubject(w.o.Names.PartitionStream(w.o.Partition), pl.cons[p])
	}
	sub, err := jsproto.SubscribeUnbounded(w.nc, pl.prefix+"*.*", pl.onMsg)
	if err != nil {
		return nil, fmt.Errorf("subscribing to pulled tasks: %w", err)
	}
	pl.sub = sub
	return pl, nil
}

// planLocked records a request of n tasks of p (a long-poll when poll),
// whose slots the caller reserved, and returns it for sending. mu is held.
func (pl *puller) planLocked(p spool.Priority, n int, poll bool) pullPlan {
	pl.seq++
	wait := pullAnswerWait
	r := jsproto.PullRequest{Batch: n, NoWait: true}
	if poll {
		wait += pl.pollWait
		r = jsproto.PullRequest{Batch: 1, Expires: pl.pollWait}
	}
	now := time.Now()
	pl.req[p] = pullRequest{id: pl.seq, want: n, poll: poll, sent: now, deadline: now.Add(wait)}
	pl.pulls.Add(1)
	return pullPlan{p: p, id: pl.seq, body: r.AppendJSON(nil)}
}

// send publishes planned requests; one that cannot be sent ends at once.
func (pl *puller) send(plans []pullPlan) {
	for _, r := range plans {
		reply := pl.prefix + strconv.Itoa(int(r.p)) + "." + strconv.FormatUint(r.id, 36)
		if err := pl.nc.PublishRequest(pl.next[r.p], reply, r.body); err != nil {
			pl.mu.Lock()
			ended := pl.endLocked(r.p, r.id, true)
			pl.mu.Unlock()
			if ended {
				pl.ev.pullFailed(r.p, err)
			}
		}
	}
}

// onMsg handles what a pull request brings: a task or a status. A status
// comes on the request's reply subject; a task keeps its own subject and
// is known by its consumer (from the ack subject). With one request per
// priority at a time, a task belongs to the priority's current request;
// one beyond what that request reserved slots for (a late arrival for an
// abandoned request) is handed back at once.
func (pl *puller) onMsg(m *nats.Msg) {
	if st, ok := jsproto.CheckStatus(m); ok {
		pl.onStatus(m.Subject, st)
		return
	}
	msg := jsproto.NewMsg(m)
	md, err := msg.Metadata()
	if err != nil {
		pl.log.Warn("pulled a message without JetStream metadata", "subject", m.Subject, "error", err)
		return
	}
	p, ok := pl.priority(md.Consumer)
	if !ok {
		pl.log.Warn("pulled a task of an unknown consumer", "consumer", md.Consumer, "subject", m.Subject)
		return
	}
	pl.mu.Lock()
	r := &pl.req[p]
	if r.id == 0 || r.got >= r.want {
		pl.mu.Unlock()
		if err := m.Nak(); err != nil {
			pl.log.Warn("handing back a task of an abandoned pull", "priority", p.String(), "error", err)
		}
		return
	}
	r.got++
	pl.slots.arrive(r.poll)
	done := r.got >= r.want
	if done {
		pl.ev.pendingLocked(p, md.NumPending)
		pl.endLocked(p, r.id, false)
	}
	start := pl.ev.admitLocked()
	if start {
		pl.slots.take(p)
	}
	pl.mu.Unlock()
	if done {
		pl.ev.nudge()
	}
	if !start {
		if err := m.Nak(); err != nil {
			pl.log.Warn("handing back a task pulled during shutdown", "priority", p.String(), "error", err)
		}
		return
	}
	pl.ev.startAttempt(p, msg)
}

// onStatus ends the request a status answers (a heartbeat ends none):
// normally for a Done status (404 no tasks now, 408 a long-poll expired),
// as a failed pull for any other.
func (pl *puller) onStatus(subject string, st jsproto.Status) {
	if st.End == jsproto.Continue {
		return
	}
	p, id, ok := pl.parseReply(subject)
	if !ok {
		return
	}
	failed := st.End != jsproto.Done
	pl.mu.Lock()
	ended := pl.endLocked(p, id, failed)
	pl.mu.Unlock()
	if !ended {
		return // an abandoned request's
	}
	pl.ev.nudge()
	if failed {
		pl.ev.pullFailed(p, fmt.Errorf("pull request answered with status %s: %w", st, st.Err))
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
// it asked for without failing means the priority is empty now. mu is
// held.
func (pl *puller) endLocked(p spool.Priority, id uint64, failed bool) bool {
	r := &pl.req[p]
	if r.id != id || id == 0 {
		return false
	}
	left := r.want - r.got
	if left > 0 && !r.poll && !failed {
		pl.ev.emptyLocked(p)
	}
	pl.slots.end(p, r.poll, max(0, left))
	*r = pullRequest{}
	pl.pulls.Done()
	return true
}

// expire ends requests that went unanswered past their deadline, or every
// outstanding request when all is true (shutdown). It reports whether any
// ended.
func (pl *puller) expire(all bool) bool {
	now := time.Now()
	pl.mu.Lock()
	ended := false
	for _, p := range spool.Priorities {
		r := pl.req[p]
		if r.id != 0 && (all || now.After(r.deadline)) {
			if !all {
				pl.log.Warn("pull request unanswered; giving its slots back", "priority", p.String(), "waited", now.Sub(r.sent).Round(time.Millisecond))
			}
			ended = pl.endLocked(p, r.id, true) || ended
		}
	}
	pl.mu.Unlock()
	return ended
}

func (pl *puller) close() {
	if err := pl.sub.Unsubscribe(); err != nil && !errors.Is(err, nats.ErrConnectionClosed) {
		pl.log.Warn("unsubscribing from pulled tasks", "error", err)
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
