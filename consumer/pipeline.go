package consumer

import (
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/spoolq/spool/consumer/internal/results"
	spool "github.com/spoolq/spool/shared"
	"github.com/spoolq/spool/shared/jsproto"
)

// pipelineDepth bounds the completion pipeline: completed attempts whose
// result write awaits its acknowledgement. When it is full, a finishing
// attempt waits for room and keeps its slot. It is a few times the slots,
// and at least 256: enough to keep the slots busy during the bucket's
// round trip (a few slots of short tasks finish hundreds of them in the
// milliseconds a loaded server takes to store a result), and not so many
// that a crash (whose unstored completions all run again) or a server
// slow to store them (SyncAlways under load) piles up work.
func pipelineDepth(maxSlots int) int { return max(256, 4*maxSlots) }

// pipeline acks completed tasks once their result document is stored
// (for a task whose result is discarded, the marker that it completed).
//
// put queues the document and returns at once; the pipeline's writer
// publishes queued documents to the results bucket in bursts (see
// writeLoop) on a jsproto.Publisher of its own, a document's token the
// key of its completion. The bucket's acknowledgement arrives on the
// publisher's subscription, and only then is the task acked. So an ack
// never precedes its stored result, whatever happens in between: a crash
// or a closed connection leaves the task unacked, and JetStream delivers
// it again.
//
// A write that meets a leader election (no acknowledgement within its
// per-try timeout, no stream to answer, a lost connection) is sent again,
// the document re-encoded from the kept outcome, while the task keeps its
// heartbeat, until it is stored or the task's retry budget (3/4 of its
// AckWait from the hand-over, at least IOTimeout) is spent: a finished attempt is never run
// again because its write met an election. Only a write the bucket
// refuses, or one still unstored when the budget is spent, NAKs the task
// for a retry.
//
// Compared with nats.go's PublishAsync futures it saves, per task, a
// future with its channels and timer, a map entry under the JetStream
// context's lock and a reflective JSON decode of the acknowledgement.
type pipeline struct {
	pub  *jsproto.Publisher
	room chan struct{} // one token per completion in flight

	// What the pipeline needs of the worker (see newPipeline).
	log     *slog.Logger
	timeout time.Duration                // per try of a result write (see writePerTry)
	budget  time.Duration                // IOTimeout: the least retry budget
	ackWait [numPriorities]time.Duration // of the priority consumers
	subject func(id string) string       // of a task's result in the bucket
	encode  func(dst []byte, doc *spool.Result) ([]byte, error)
	// encodeEvent encodes a task's completed event, the document it
	// embeds being what the bucket stores, into a buffer of evBuf's;
	// publish sends it once the task is acked, and putEvBuf then takes
	// the buffer back.
	encodeEvent  func(buf []byte, kind spool.EventKind, doc *spool.Result) (event, data []byte, err error)
	evBuf        func() *[]byte
	putEvBuf     func(buf *[]byte, used []byte)
	eventSubject func(kind spool.EventKind, p spool.Priority, id, typ string) string
	publish      func(subject string, data []byte) error
	attempts     *sync.WaitGroup // counts each completion until it is settled
	rec          *recorder
	// lost NAKs a completed task whose result could not be stored, for a
	// retry.
	lost func(a attemptInfo, o outcome, err error)
	// conflicted settles a completion whose conditional write lost a race
	// (the task's result changed since the attempt read it).
	conflicted func(a attemptInfo, o outcome, doc spool.Result)

	mu      sync.Mutex
	next    uint64
	pending map[uint64]*completion
	queue   []resultWrite // written by the writer goroutine, in order

	// stored holds completions whose result is stored, to be acked at the
	// end of a burst of acknowledgements (see onAck); only the
	// subscription's goroutine uses it.
	stored []*completion

	// kick wakes the writer (capacity 1); spare is the writer's other
	// queue buffer, swapped with queue on every round.
	kick  chan struct{}
	spare []resultWrite
	// expectNone is the header of a write that expects no document yet
	// (see expectRev).
	expectNone nats.Header

	stopSweep chan struct{}
	swept     chan struct{}
	stopWrite chan struct{}
	written   chan struct{}
}

// resultWrite is a result document waiting for the writer.
type resultWrite struct {
	tok  uint64
	id   string
	rev  uint64 // the revision the write expects (see putFinal)
	data []byte
	// discard writes the marker of a discarded result instead of data.
	discard bool
}

// completion is a completed attempt whose result write is in flight.
type completion struct {
	a   attemptInfo
	o   outcome
	doc spool.Result // re-encoded for a retry
	fin time.Time    // doc.FinishedAt points here
	tok uint64       // of its writes in the pending map
	// deadline ends the try in flight (zero while a retry waits);
	// retryAt is when the next try goes (zero while one is in flight);
	// until ends the retries.
	deadline time.Time
	retryAt  time.Time
	until    time.Time
	tries    int
	lastErr  error
	// beat is when the task's AckWait clock last restarted as far as the
	// worker knows: the attempt's last heartbeat (or the task's arrival),
	// then each InProgress the sweep sends.
	beat time.Time
	// evSubject and evBody are the completed event, sent after the ack;
	// the first try's document is a subslice of evBody, whose buffer
	// evBuf goes back to the pool once the event is sent.
	evSubject string
	evBody    []byte
	evBuf     *[]byte
}

// newPipeline starts the completion pipeline; settle takes over a
// completion whose result cannot be stored as written.
func newPipeline(nc *nats.Conn, io *taskIO, res *results.Store, o *config, attempts *sync.WaitGroup, settle *settling) (*pipeline, error) {
	p := &pipeline{
		log:          io.log,
		timeout:      io.perTry,
		budget:       io.ioTimeout,
		ackWait:      io.ackWait,
		subject:      res.Subject,
		encode:       res.Encode,
		encodeEvent:  res.EncodeEvent,
		evBuf:        res.EventBuf,
		putEvBuf:     res.PutEventBuf,
		eventSubject: io.names.EventSubject,
		publish:      nc.Publish,
		attempts:     attempts,
		rec:          io.rec,
		lost:         settle.resultLost,
		conflicted:   settle.finishConflicted,
		room:         make(chan struct{}, pipelineDepth(o.MaxConcurrency)),
		pending:      make(map[uint64]*completion),
		kick:         make(chan struct{}, 1),
		expectNone:   nats.Header{jetstream.ExpectedLastSubjSeqHeader: {"0"}},
		stopSweep:    make(chan struct{}),
		swept:        make(chan struct{}),
		stopWrite:    make(chan struct{}),
		written:      make(chan struct{}),
	}
	pub, err := jsproto.NewPublisher(nc, p.onAck)
	if err != nil {
		return nil, fmt.Errorf("result writes: %w", err)
	}
	if !o.Events {
		p.publish = func(string, []byte) error { return nil }
	}
	p.pub = pub
	go p.sweep()
	go p.writeLoop()
	return p, nil
}

// put queues doc, finished at fin, for the writer and hands the attempt
// to the pipeline. On error nothing was handed over. The document is
// encoded once, inside its completed event: the write sends the
// document's part of the event's buffer, and the event goes once the task
// is acked.
func (p *pipeline) put(a *attemptInfo, o outcome, doc *spool.Result, fin time.Time) error {
	c := &completion{a: *a, o: o, doc: *doc, fin: fin}
	c.doc.FinishedAt = &c.fin
	c.evBuf = p.evBuf()
	ev, data, err := p.encodeEvent((*c.evBuf)[:0], spool.EventCompleted, &c.doc)
	if err != nil {
		p.putEvBuf(c.evBuf, nil)
		return err
	}
	c.evBody = ev
	c.evSubject = p.eventSubject(spool.EventCompleted, c.doc.Priority, c.doc.ID, c.doc.Type)
	beat := a.beat
	if beat.IsZero() {
		beat = time.Now()
	}
	select {
	case p.room <- struct{}{}:
	default:
		beat = p.awaitRoom(a, beat)
	}
	// Counted as an attempt until settled, so shutdown waits for it; added
	// while the calling attempt still counts, so the count cannot reach
	// zero in between, and before anything can settle it.
	p.attempts.Add(1)
	now := time.Now()
	c.deadline, c.until, c.beat = now.Add(p.timeout), now.Add(p.retryBudget(a.p)), beat
	p.mu.Lock()
	p.next++
	tok := p.next
	c.tok = tok
	p.pending[tok] = c
	p.queue = append(p.queue, resultWrite{tok: tok, id: c.doc.ID, rev: a.rev, data: data, discard: c.doc.ResultDiscarded})
	first := len(p.queue) == 1
	p.mu.Unlock()
	if first {
		select {
		case p.kick <- struct{}{}:
		default:
		}
	}
	return nil
}

// awaitRoom waits for room in the full window (result writes held up by
// an election or a slow store), heartbeating the task every quarter of its
// AckWait from beat, its last heartbeat, as the sweep does once it is in.
// It returns the time of the last heartbeat. The wait is on the calling
// slot's goroutine: a full window holds the slots back.
func (p *pipeline) awaitRoom(a *attemptInfo, beat time.Time) time.Time {
	every := p.ackWait[a.p] / 4
	if every <= 0 {
		every = time.Second // AckWait unknown
	}
	t := time.NewTimer(time.Until(beat.Add(every)))
	defer t.Stop()
	for {
		select {
		case p.room <- struct{}{}:
			return beat
		case <-t.C:
			if err := a.msg.InProgress(); err != nil {
				p.log.Warn("heartbeat of a completed task waiting for room in the result pipeline failed", "task_id", a.id, "error", err)
			}
			beat = time.Now()
			t.Reset(every)
		}
	}
}

// writeLoop publishes queued result documents in rounds: each round
// takes every document queued since the last, so attempts finishing
// while a round is sent join the next one, and their writes leave in one
// burst, which the connection sends in one or a few network writes
// instead of one each.
func (p *pipeline) writeLoop() {
	defer close(p.written)
	for {
		select {
		case <-p.kick:
		case <-p.stopWrite:
			return
		}
		p.mu.Lock()
		q := p.queue
		p.queue = p.spare
		p.mu.Unlock()
		for i, wr := range q {
			// Conditional on the revision the attempt read, so a
			// cancellation stored meanwhile is never overwritten.
			var m *nats.Msg
			if wr.discard {
				m = results.DiscardedMarker(p.subject(wr.id), wr.rev)
			} else {
				m = &nats.Msg{Subject: p.subject(wr.id), Data: wr.data, Header: p.expectRev(wr.rev)}
			}
			if err := p.pub.PublishMsg(m, wr.tok); err != nil {
				p.failTry(wr.tok, err)
			}
			q[i] = resultWrite{}
		}
		p.spare = q[:0]
	}
}

// expectRev is the header of a write conditional on revision rev. Most
// writes expect revision 0 (a first attempt reads no document): they share
// one header, which nothing changes once made.
func (p *pipeline) expectRev(rev uint64) nats.Header {
	if rev == 0 {
		return p.expectNone
	}
	return nats.Header{jetstream.ExpectedLastSubjSeqHeader: {strconv.FormatUint(rev, 10)}}
}

// take removes and returns the completion of tok, nil when it is gone.
func (p *pipeline) take(tok uint64) *completion {
	p.mu.Lock()
	defer p.mu.Unlock()
	c := p.pending[tok]
	delete(p.pending, tok)
	return c
}

func (p *pipeline) done() {
	<-p.room
	p.attempts.Done()
}

// onAck settles the completion a bucket acknowledgement answers. Tasks
// whose result is stored are acked together once no further
// acknowledgement is queued on the subscription, or once ackBurst of them
// wait: acknowledgements arrive in bursts (the writer sends results in
// bursts), and acks sent in one burst leave in one network write.
func (p *pipeline) onAck(tok uint64, _ jsproto.PubAck, err error) {
	p.settleAck(tok, err)
	if len(p.stored) >= ackBurst || p.pub.Pending() <= 1 {
		p.ackStored()
	}
}

// ackBurst is the most stored completions held for one burst of acks:
// under a steady stream of acknowledgements the burst never ends, and the
// held completions would fill the window and stall the slots.
const ackBurst = 32

func (p *pipeline) settleAck(tok uint64, err error) {
	if err != nil {
		p.failTry(tok, err)
		return
	}
	c := p.take(tok)
	if c == nil {
		return // given up already
	}
	p.stored = append(p.stored, c)
}

// failTry handles a try of tok's write that failed with err: a retryable
// failure within the budget waits for its retry (the sweep sends it);
// any other hands the task back.
func (p *pipeline) failTry(tok uint64, err error) {
	now := time.Now()
	p.mu.Lock()
	c := p.pending[tok]
	if c == nil {
		p.mu.Unlock()
		return // settled already (an earlier try's acknowledgement)
	}
	if results.IsConflict(err) {
		// The task's result changed since the attempt read it (its own
		// processing state, a cancellation, an earlier try of this very
		// write): settled off the subscription's goroutine.
		delete(p.pending, tok)
		p.mu.Unlock()
		go func() {
			p.conflicted(c.a, c.o, c.doc)
			p.done()
		}()
		return
	}
	if jsproto.Retryable(err) && now.Before(c.until) {
		if c.retryAt.IsZero() {
			c.retryAt = now.Add(retryWait(c.tries))
			c.deadline = time.Time{}
		}
		c.lastErr = err
		p.mu.Unlock()
		return
	}
	delete(p.pending, tok)
	p.mu.Unlock()
	p.lost(c.a, c.o, fmt.Errorf("writing completed result of task %s (%d tries): %w", c.a.id, c.tries+1, err))
	p.done()
}

// retryWait is the wait before the next try of a write tried tries+1
// times: 50ms, doubling up to 1s.
func retryWait(tries int) time.Duration {
	return min(50*time.Millisecond<<min(tries, 5), time.Second)
}

// retryBudget is how long a completion of priority p keeps trying to
// store its result.
func (p *pipeline) retryBudget(pr spool.Priority) time.Duration {
	return retryBudget(p.ackWait[pr], p.budget)
}

// retryBudget is how long a settling write of a task whose consumer has
// ackWait keeps trying: 3/4 of its AckWait, the heartbeats keeping the
// task ours meanwhile, and at least least (IOTimeout).
func retryBudget(ackWait, least time.Duration) time.Duration {
	return max(ackWait-ackWait/4, least)
}

// writePerTry is the per-try timeout of a settling write: IOTimeout, at
// most jsproto.DefaultPerTry (an election swallows a write; waiting long
// for its answer only delays the retry).
func writePerTry(ioTimeout time.Duration) time.Duration {
	return min(ioTimeout, jsproto.DefaultPerTry)
}

// ackStored acks the tasks whose result is stored. Only the subscription's
// goroutine calls it.
func (p *pipeline) ackStored() {
	for i, c := range p.stored {
		if err := c.a.msg.Ack(); err != nil {
			p.log.Warn("acking completed task", "task_id", c.a.id, "error", err)
		}
		_ = p.publish(c.evSubject, c.evBody) // best effort: events are notifications
		p.putEvBuf(c.evBuf, c.evBody)
		p.rec.record(c.a.p, c.a.typ, c.o)
		p.done()
		p.stored[i] = nil
	}
	p.stored = p.stored[:0]
}

// close ends the pipeline once it is empty (shutdown waits for that).
func (p *pipeline) close() {
	close(p.stopWrite)
	<-p.written
	close(p.stopSweep)
	<-p.swept
	if err := p.pub.Close(); err != nil {
		p.log.Warn("closing the result writer", "error", err)
	}
}
