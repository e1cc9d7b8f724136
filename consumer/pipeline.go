package consumer

import (
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"sync"
	"time"

	spool "github.com/spoolq/spool/shared"
	"github.com/spoolq/spool/shared/jsproto"
)

// pipelineDepth bounds the completion pipeline: completed attempts whose
// result write awaits its acknowledgement. When it is full, a finishing
// attempt waits for room and keeps its slot. It is a few times the slots:
// enough to keep the slots busy during the bucket's round trip, and not so
// many that a crash (whose completions in flight all run again) or a
// server slow to store them (SyncAlways under load) piles up work.
func pipelineDepth(maxSlots int) int { return max(64, 4*maxSlots) }

// pipeline acks completed tasks once their result document is stored.
//
// put queues the document and returns at once; the pipeline's writer
// publishes queued documents to the results bucket in bursts (see
// writeLoop) on a jsproto.Publisher of its own, a document's token the
// key of its completion. The bucket's acknowledgement arrives on the
// publisher's subscription, and only then is the task acked. A write the bucket refuses, or whose
// acknowledgement does not come within IOTimeout (a lost connection), NAKs
// the task for a retry instead. So an ack never precedes its stored
// result, whatever happens in between: a crash or a closed connection
// leaves the task unacked, and JetStream delivers it again.
//
// Compared with nats.go's PublishAsync futures it saves, per task, a
// future with its channels and timer, a map entry under the JetStream
// context's lock and a reflective JSON decode of the acknowledgement.
type pipeline struct {
	pub  *jsproto.Publisher
	room chan struct{} // one token per completion in flight

	// What the pipeline needs of the worker (see newPipeline).
	log     *slog.Logger
	timeout time.Duration                // IOTimeout: for each result write
	ackWait [numPriorities]time.Duration // of the priority consumers
	subject func(id string) string       // of a task's result in the bucket
	encode  func(dst []byte, doc *spool.Result) ([]byte, error)
	// event builds a task's completed event; publish sends it once the
	// task is acked.
	event    func(kind spool.EventKind, doc *spool.Result, data []byte) (string, []byte)
	publish  func(subject string, data []byte) error
	attempts *sync.WaitGroup // counts each completion until it is settled
	rec      *recorder
	// lost NAKs a completed task whose result could not be stored, for a
	// retry.
	lost func(a attemptInfo, o outcome, err error)

	mu      sync.Mutex
	next    uint64
	pending map[uint64]*completion
	queue   []resultWrite // written by the writer goroutine, in order

	// stored holds completions whose result is stored, to be acked at the
	// end of a burst of acknowledgements (see onAck); only the
	// subscription's goroutine uses it.
	stored []*completion

	// bufs holds encoding buffers (*[]byte): nats.go copies a message as
	// it publishes it, so the writer gives a document's buffer back right
	// after.
	bufs sync.Pool

	// kick wakes the writer (capacity 1); spare is the writer's other
	// queue buffer, swapped with queue on every round.
	kick  chan struct{}
	spare []resultWrite

	stopSweep chan struct{}
	swept     chan struct{}
	stopWrite chan struct{}
	written   chan struct{}
}

// resultWrite is a result document waiting for the writer.
type resultWrite struct {
	tok  uint64
	id   string
	data []byte
	buf  *[]byte // from bufs
}

// maxPooledBuf is the largest encoding buffer kept for reuse: a large
// result would otherwise stay in the pool.
const maxPooledBuf = 4 << 10

// completion is a completed attempt whose result write is in flight.
type completion struct {
	a        attemptInfo
	o        outcome
	deadline time.Time
	// beat is when the task's AckWait clock last restarted as far as the
	// pipeline knows: the hand-over, then each InProgress the sweep sends.
	beat time.Time
	// evSubject and evBody are the completed event, sent after the ack.
	evSubject string
	evBody    []byte
}

func newPipeline(w *Worker) (*pipeline, error) {
	p := &pipeline{
		log:       w.log,
		timeout:   w.o.IOTimeout,
		ackWait:   w.ackWait,
		subject:   w.results.Subject,
		encode:    w.results.Encode,
		event:     w.results.EventMsg,
		publish:   w.nc.Publish,
		attempts:  &w.attempts,
		rec:       w.rec,
		lost:      w.resultLost,
		room:      make(chan struct{}, pipelineDepth(w.o.MaxConcurrency)),
		pending:   make(map[uint64]*completion),
		kick:      make(chan struct{}, 1),
		stopSweep: make(chan struct{}),
		swept:     make(chan struct{}),
		stopWrite: make(chan struct{}),
		written:   make(chan struct{}),
	}
	p.bufs.New = func() any {
		b := make([]byte, 0, 512)
		return &b
	}
	pub, err := jsproto.NewPublisher(w.nc, p.onAck)
	if err != nil {
		return nil, fmt.Errorf("result writes: %w", err)
	}
	p.pub = pub
	go p.sweep()
	go p.writeLoop()
	return p, nil
}

// put queues doc for the writer and hands the attempt to the pipeline.
// On error nothing was handed over.
func (p *pipeline) put(a attemptInfo, o outcome, doc spool.Result) error {
	buf := p.bufs.Get().(*[]byte)
	data, err := p.encode((*buf)[:0], &doc)
	if err != nil {
		p.bufs.Put(buf)
		return err
	}
	p.room <- struct{}{}
	// Counted as an attempt until settled, so shutdown waits for it; added
	// while the calling attempt still counts, so the count cannot reach
	// zero in between, and before anything can settle it.
	p.attempts.Add(1)
	now := time.Now()
	c := &completion{a: a, o: o, deadline: now.Add(p.timeout), beat: now}
	c.evSubject, c.evBody = p.event(spool.EventCompleted, &doc, data)
	p.mu.Lock()
	p.next++
	tok := p.next
	p.pending[tok] = c
	p.queue = append(p.queue, resultWrite{tok: tok, id: doc.ID, data: data, buf: buf})
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

// writeBurst is the queue length from which the writer does not yield
// before a round: the burst is there already.
const writeBurst = 8

// writeLoop publishes queued result documents in rounds. Before a round
// that would be short it yields once, so attempts finishing at about the
// same time join it: their writes leave in one burst, which the
// connection sends in one or a few network writes instead of one each (a
// network write costs the worker and the server several times what
// publishing a message does). A yield costs a trip through the scheduler,
// so a round that is long already goes at once.
func (p *pipeline) writeLoop() {
	defer close(p.written)
	for {
		select {
		case <-p.kick:
		case <-p.stopWrite:
			return
		}
		p.mu.Lock()
		short := len(p.queue) < writeBurst
		p.mu.Unlock()
		if short {
			runtime.Gosched()
		}
		p.mu.Lock()
		q := p.queue
		p.queue = p.spare
		p.mu.Unlock()
		for i, wr := range q {
			if err := p.pub.Publish(p.subject(wr.id), wr.data, wr.tok); err != nil {
				if c := p.take(wr.tok); c != nil {
					p.lost(c.a, c.o, fmt.Errorf("writing completed result of task %s: %w", wr.id, err))
					p.done()
				}
			}
			if cap(wr.data) <= maxPooledBuf {
				*wr.buf = wr.data[:0] // the buffer the document grew into
				p.bufs.Put(wr.buf)
			}
			q[i] = resultWrite{}
		}
		p.spare = q[:0]
	}
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
// acknowledgement is queued on the subscription: acknowledgements arrive
// in bursts (the writer sends results in bursts), and acks sent in one
// burst leave in one network write.
func (p *pipeline) onAck(tok uint64, _ jsproto.PubAck, err error) {
	p.settleAck(tok, err)
	if p.pub.Pending() <= 1 {
		p.ackStored()
	}
}

func (p *pipeline) settleAck(tok uint64, err error) {
	c := p.take(tok)
	if c == nil {
		return // timed out already
	}
	if err != nil {
		p.lost(c.a, c.o, fmt.Errorf("writing completed result of task %s: %w", c.a.id, err))
		p.done()
		return
	}
	p.stored = append(p.stored, c)
}

// ackStored acks the tasks whose result is stored. Only the subscription's
// goroutine calls it.
func (p *pipeline) ackStored() {
	for i, c := range p.stored {
		if err := c.a.msg.Ack(); err != nil {
			p.log.Warn("acking completed task", "task_id", c.a.id, "error", err)
		}
		_ = p.publish(c.evSubject, c.evBody) // best effort: events are notifications
		p.rec.record(c.a.p, c.a.typ, c.o)
		p.done()
		p.stored[i] = nil
	}
	p.stored = p.stored[:0]
}

// errAckTimeout is the fate of a result write whose acknowledgement did
// not come in time.
var errAckTimeout = errors.New("no acknowledgement of the result write")

// sweep fails completions whose acknowledgement is overdue, and heartbeats
// the ones still waiting, so a slow result write (a leader change, a
// server under fsync load) never lets AckWait run out on a task that
// succeeded: it would run again, and after MaxDeliver such waits be
// dead-lettered although it completed.
//
// The attempt's own heartbeat stops at hand-over, having last beaten at
// most AckWait/3 earlier; the sweep beats a completion once it has waited
// beatAfter = AckWait/4 and checks every AckWait/6 at most, so the task
// goes at most 3/4 of AckWait without a heartbeat.
func (p *pipeline) sweep() {
	defer close(p.swept)
	every := max(min(p.timeout/4, p.minAckWait()/6), 10*time.Millisecond)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-p.stopSweep:
			return
		case <-t.C:
		}
		now := time.Now()
		var late, beat []*completion
		p.mu.Lock()
		for tok, c := range p.pending {
			switch {
			case now.After(c.deadline):
				late = append(late, c)
				delete(p.pending, tok)
			case now.Sub(c.beat) >= p.ackWait[c.a.p]/4:
				c.beat = now
				beat = append(beat, c)
			}
		}
		p.mu.Unlock()
		for _, c := range beat {
			// A heartbeat racing the ack is harmless: the server ignores an
			// InProgress for a message already acked.
			if err := c.a.msg.InProgress(); err != nil {
				p.log.Warn("heartbeat of a completed task awaiting its result write failed", "task_id", c.a.id, "error", err)
			}
		}
		for _, c := range late {
			p.lost(c.a, c.o, fmt.Errorf("writing completed result of task %s: %w within %s", c.a.id, errAckTimeout, p.timeout))
			p.done()
		}
	}
}

// minAckWait is the shortest AckWait of the priority consumers.
func (p *pipeline) minAckWait() time.Duration {
	m := p.ackWait[0]
	for _, d := range p.ackWait[1:] {
		if d > 0 && (m == 0 || d < m) {
			m = d
		}
	}
	if m == 0 {
		return time.Second
	}
	return m
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
