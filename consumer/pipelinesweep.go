package consumer

import (
	"errors"
	"fmt"
	"time"
)

// errAckTimeout is the fate of a result write whose acknowledgement did
// not come in time.
var errAckTimeout = errors.New("no acknowledgement of the result write")

// sweep fails completions whose acknowledgement is overdue, and heartbeats
// the ones still waiting, so a slow result write (a leader change, a
// server under fsync load) never lets AckWait run out on a task that
// succeeded: it would run again, and after MaxDeliver such waits be
// dead-lettered although it completed.
//
// The attempt's own heartbeat stops at hand-over; the sweep beats a
// completion once AckWait/4 has passed since the task's last heartbeat
// (the attempt's, or its arrival), and checks every AckWait/6 at most, so
// the task goes at most about AckWait/2 without a heartbeat.
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
		var late, beat, again []*completion
		p.mu.Lock()
		for tok, c := range p.pending {
			if c.retryAt.IsZero() && now.After(c.deadline) {
				// No acknowledgement in time: the write, or its answer,
				// was lost (an election, a lost connection).
				c.lastErr = fmt.Errorf("%w within %s", errAckTimeout, p.timeout)
				if now.Before(c.until) {
					c.retryAt = now
				} else {
					late = append(late, c)
					delete(p.pending, tok)
					continue
				}
			}
			if !c.retryAt.IsZero() && !now.Before(c.retryAt) {
				c.tries++
				c.retryAt = time.Time{}
				c.deadline = now.Add(p.timeout)
				again = append(again, c)
			}
			if now.Sub(c.beat) >= p.ackWait[c.a.p]/4 {
				c.beat = now
				beat = append(beat, c)
			}
		}
		p.mu.Unlock()
		p.resend(again)
		for _, c := range beat {
			// A heartbeat racing the ack is harmless: the server ignores an
			// InProgress for a message already acked.
			if err := c.a.msg.InProgress(); err != nil {
				p.log.Warn("heartbeat of a completed task awaiting its result write failed", "task_id", c.a.id, "error", err)
			}
		}
		for _, c := range late {
			p.lost(c.a, c.o, fmt.Errorf("writing completed result of task %s (%d tries in %s): %w",
				c.a.id, c.tries+1, p.retryBudget(c.a.p), c.lastErr))
			p.done()
		}
	}
}

// resend queues the writes of again for the writer, each document encoded
// afresh into a buffer of its own (the first try's is part of the event).
func (p *pipeline) resend(again []*completion) {
	if len(again) == 0 {
		return
	}
	writes := make([]resultWrite, 0, len(again))
	for _, c := range again {
		p.rec.writeRetry(c.a.p, c.a.typ)
		p.log.Debug("result write sent again", "task_id", c.a.id, "try", c.tries+1, "error", c.lastErr)
		data, err := p.encode(nil, &c.doc)
		if err != nil { // encoded once already: cannot happen
			p.failTry(c.tok, err)
			continue
		}
		writes = append(writes, resultWrite{tok: c.tok, id: c.a.id, rev: c.a.rev, data: data, discard: c.doc.ResultDiscarded})
	}
	p.mu.Lock()
	p.queue = append(p.queue, writes...)
	p.mu.Unlock()
	select {
	case p.kick <- struct{}{}:
	default:
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
