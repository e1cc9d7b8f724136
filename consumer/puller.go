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

// pullEvents is what the puller tells the worker, and asks of it. A lane
// is an index into the worker's lanes (laneOf).
type pullEvents interface {
	// pendingLocked records the lane's backlog as a fulfilled request saw
	// it.
	pendingLocked(lane int, pending uint64)
	// emptyLocked records that the lane has no task now (a no-wait
	// request ended short of what it asked for).
	emptyLocked(lane int)
	// admitLocked counts an attempt of a task of the lane about to start
	// and gives it a slot (start), or, a fetched task finding every slot
	// busy (pulled ahead), queues it for the next slot that frees
	// (neither); handBack once the worker stops (the task is to be handed
	// back).
	admitLocked(lane int, poll bool, m jetstream.Msg) (start, handBack bool)
	// roundTripLocked records how long a no-wait fetch took.
	roundTripLocked(d time.Duration)
	// startAttempt runs an admitted attempt of a pulled task.
	startAttempt(lane int, m jetstream.Msg)
	// pullFailed rests the lane after a failed pull.
	pullFailed(lane int, err error)
	// nudge wakes the dispatcher: a request ended.
	nudge()
}

var _ pullEvents = (*dispatcher)(nil)

// puller sends the worker's pull requests and receives what they bring on
// one wildcard subscription that lives as long as the worker: a request's
// reply subject is <inbox>.<lane>.<request>. Compared with a fetch per
// pull (which subscribes and unsubscribes every time), a pull costs one
// published request.
//
// A lane is one priority consumer of one task partition the worker pulls:
// lane j·numPriorities+p is priority p of the worker's j-th partition
// (laneOf). Each lane has at most one request outstanding (dispatch plans
// a no-wait fetch or a long-poll for a lane, never both); its slots are
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
	prefix   string // reply subjects: prefix + lane + "." + request
	sub      *nats.Subscription
	next     []string         // per lane: $JS.API.CONSUMER.MSG.NEXT.<stream>.<consumer>
	names    []laneName       // per lane: its stream and consumer, for logs
	byName   map[laneName]int // a pulled task's lane, by its stream and consumer
	// stale is, per priority, how long a task may have waited in the
	// stream before it is heartbeated as it arrives (see onMsg).
	stale [numPriorities]time.Duration

	// mu (the worker's) guards slots, seq, req and what the events'
	// Locked methods touch; pulls counts outstanding requests.
	mu    *sync.Mutex
	slots *slots
	pulls *sync.WaitGroup
	seq   uint64
	req   []pullRequest // per lane
}

// pullRequest is the outstanding request of a lane; id 0 means none.
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
	lane int
	id   uint64
	body []byte
}

// laneOf is the lane of priority p of the worker's g-th lane group: one
// per partition pulled, or where workers pull by type one per partition
// and served pattern (partition-major).
func laneOf(g int, p spool.Priority) int { return g*numPriorities + int(p) }

// laneName is what a lane pulls: a consumer of a task stream.
type laneName struct{ stream, consumer string }

// priorityLanes names the lanes of the priority consumers of streams, in
// laneOf order.
func priorityLanes(names spool.Names, streams []string) []laneName {
	out := make([]laneName, 0, len(streams)*numPriorities)
	for _, s := range streams {
		for _, p := range spool.Priorities {
			out = append(out, laneName{s, names.Consumer(p)})
		}
	}
	return out
}

// lanePriority is the priority a lane pulls.
func lanePriority(lane int) spool.Priority { return spool.Priority(lane % numPriorities) }

func newPuller(d *dispatcher, nc *nats.Conn) (*puller, error) {
	pl := &puller{
		nc:       nc,
		log:      d.log,
		pollWait: d.o.PollWait,
		ev:       d,
		prefix:   nc.NewInbox() + ".",
		mu:       &d.mu,
		slots:    &d.slots,
		pulls:    &d.pulls,
	}
	lanes := make([]laneName, len(d.lanes))
	for i := range d.lanes {
		ln := &d.lanes[i] // stream and cons are fixed after Start
		lanes[i] = laneName{ln.stream.CachedInfo().Config.Name, ln.cons.CachedInfo().Name}
	}
	pl.setLanes(lanes)
	for p, aw := range d.ackWait {
		pl.stale[p] = aw / 4
	}
	sub, err := jsproto.SubscribeUnbounded(nc, pl.prefix+"*.*", pl.onMsg)
	if err != nil {
		return nil, fmt.Errorf("subscribing to pulled tasks: %w", err)
	}
	pl.sub = sub
	return pl, nil
}

// setLanes sets the lanes, in laneOf order.
func (pl *puller) setLanes(lanes []laneName) {
	pl.names = lanes
	pl.byName = make(map[laneName]int, len(lanes))
	pl.next = make([]string, len(lanes))
	pl.req = make([]pullRequest, len(lanes))
	for i, ln := range lanes {
		pl.byName[ln] = i
		pl.next[i] = jsproto.NextSubject(ln.stream, ln.consumer)
	}
}

// planLocked records a request of n tasks of a lane (a long-poll when
// poll, which ends as n tasks came or it expires), whose slots the caller
// reserved, and returns it for sending. mu is held.
func (pl *puller) planLocked(lane int, n int, poll bool) pullPlan {
	pl.seq++
	wait := pullAnswerWait
	r := jsproto.PullRequest{Batch: n, NoWait: true}
	if poll {
		wait += pl.pollWait
		r = jsproto.PullRequest{Batch: n, Expires: pl.pollWait}
	}
	now := time.Now()
	pl.req[lane] = pullRequest{id: pl.seq, want: n, poll: poll, sent: now, deadline: now.Add(wait)}
	pl.pulls.Add(1)
	return pullPlan{lane: lane, id: pl.seq, body: r.AppendJSON(nil)}
}

// polling reports whether the lane has a long-poll out. mu is held.
func (pl *puller) polling(lane int) bool { return pl.req[lane].id != 0 && pl.req[lane].poll }

// outstanding reports whether the lane has a request out. mu is held.
func (pl *puller) outstanding(lane int) bool { return pl.req[lane].id != 0 }

// send publishes planned requests; one that cannot be sent ends at once.
func (pl *puller) send(plans []pullPlan) {
	for _, r := range plans {
		reply := pl.prefix + strconv.Itoa(r.lane) + "." + strconv.FormatUint(r.id, 36)
		if err := pl.nc.PublishRequest(pl.next[r.lane], reply, r.body); err != nil {
			pl.mu.Lock()
			ended := pl.endLocked(r.lane, r.id, true)
			pl.mu.Unlock()
			if ended {
				pl.ev.pullFailed(r.lane, err)
			}
		}
	}
}

// onMsg handles what a pull request brings: a task or a status. A status
// comes on the request's reply subject; a task keeps its own subject and
// is known by its stream and consumer (from the ack subject). With one
// request per lane at a time, a task belongs to the lane's current request;
// one beyond what that request reserved slots for (a late arrival for an
// abandoned request) is handed back at once. A task that finds every slot
// busy (it was pulled ahead) waits in the worker's queue.
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
	lane, ok := pl.lane(md.Stream, md.Consumer)
	if !ok {
		pl.log.Warn("pulled a task of an unknown consumer", "stream", md.Stream, "consumer", md.Consumer, "subject", m.Subject)
		return
	}
	p := lanePriority(lane)
	// A replicated consumer records a delivery on its replicas at the time
	// the task was stored in the stream, not the time it was delivered
	// (the leader alone keeps the delivery time), and a new consumer
	// leader at once redelivers what its record shows overdue. A task that
	// waited in the stream for a quarter of its AckWait or more is
	// heartbeated as it arrives: the heartbeat's time is replicated, so a
	// leader change while the task waits for a slot, runs or stores its
	// result leaves it with this worker instead of running it twice.
	if d := pl.stale[p]; d > 0 && time.Since(md.Timestamp) >= d {
		if err := msg.InProgress(); err != nil {
			pl.log.Warn("heartbeat of a task that waited in the stream failed", "priority", p.String(), "error", err)
		}
	}
	pl.mu.Lock()
	r := &pl.req[lane]
	if r.id == 0 || r.got >= r.want {
		pl.mu.Unlock()
		if err := m.Nak(); err != nil {
			pl.log.Warn("handing back a task of an abandoned pull", "priority", p.String(), "error", err)
		}
		return
	}
	r.got++
	poll := r.poll // r is cleared when the request ends
	pl.slots.arrive(poll)
	done := r.got >= r.want
	if done {
		pl.ev.pendingLocked(lane, md.NumPending)
		pl.endLocked(lane, r.id, false)
	}
	start, handBack := pl.ev.admitLocked(lane, poll, msg)
	pl.mu.Unlock()
	if done {
		pl.ev.nudge()
	}
	if handBack {
		if err := m.Nak(); err != nil {
			pl.log.Warn("handing back a task pulled during shutdown", "priority", p.String(), "error", err)
		}
		return
	}
	if start {
		pl.ev.startAttempt(lane, msg)
	}
}

// onStatus ends the request a status answers (a heartbeat ends none):
// normally for a Done status (404 no tasks now, 408 a long-poll expired),
// as a failed pull for any other.
func (pl *puller) onStatus(subject string, st jsproto.Status) {
	if st.End == jsproto.Continue {
		return
	}
	lane, id, ok := pl.parseReply(subject)
	if !ok {
		return
	}
	failed := st.End != jsproto.Done
	pl.mu.Lock()
	ended := pl.endLocked(lane, id, failed)
	pl.mu.Unlock()
	if !ended {
		return // an abandoned request's
	}
	pl.ev.nudge()
	if failed {
		pl.ev.pullFailed(lane, fmt.Errorf("pull request answered with status %s: %w", st, st.Err))
	}
}

// lane is the lane of the consumer named consumer of stream.
func (pl *puller) lane(stream, consumer string) (int, bool) {
	i, ok := pl.byName[laneName{stream, consumer}]
	return i, ok
}

// endLocked ends request id of a lane, giving back the slots it still
// holds; false when it had ended already. A no-wait fetch that ends short
// of what it asked for without failing means the lane is empty now. mu is
// held.
func (pl *puller) endLocked(lane int, id uint64, failed bool) bool {
	r := &pl.req[lane]
	if r.id != id || id == 0 {
		return false
	}
	left := r.want - r.got
	if left > 0 && !r.poll && !failed {
		pl.ev.emptyLocked(lane)
	}
	if !r.poll && !failed {
		pl.ev.roundTripLocked(time.Since(r.sent))
	}
	pl.slots.end(r.poll, max(0, left))
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
	for lane, r := range pl.req {
		if r.id != 0 && (all || now.After(r.deadline)) {
			if !all {
				pl.log.Warn("pull request unanswered; giving its slots back", "stream", pl.names[lane].stream, "consumer", pl.names[lane].consumer,
					"priority", lanePriority(lane).String(), "waited", now.Sub(r.sent).Round(time.Millisecond))
			}
			ended = pl.endLocked(lane, r.id, true) || ended
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

// parseReply reads the lane and request of a reply subject.
func (pl *puller) parseReply(subject string) (int, uint64, bool) {
	rest, ok := strings.CutPrefix(subject, pl.prefix)
	if !ok {
		return 0, 0, false
	}
	ps, ids, ok := strings.Cut(rest, ".")
	if !ok {
		return 0, 0, false
	}
	lane, err := strconv.Atoi(ps)
	if err != nil || lane < 0 || lane >= len(pl.req) {
		return 0, 0, false
	}
	id, err := strconv.ParseUint(ids, 36, 64)
	if err != nil {
		return 0, 0, false
	}
	return lane, id, true
}
