package producer

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/spoolq/spool/shared/jsproto"
	"github.com/spoolq/spool/shared/limits"
)

// Pending is a task EnqueueAsync published whose acknowledgement may still
// be on its way. Wait gives its outcome.
type Pending struct {
	c    *Client
	b    *batch
	id   string
	done bool // settled when EnqueueAsync returned (res holds the outcome)
	// once settles res and err; a concurrent Wait blocks in it until
	// they are final.
	once sync.Once
	res  EnqueueResult
	err  error
}

// ID is the task's id.
func (p *Pending) ID() string { return p.id }

// EnqueueAsync validates a task, claims its unique key and publishes it
// without waiting for the stream's acknowledgement, keeping at most the
// client's publish window (WithPublishWindow, default
// DefaultPublishWindow) in flight: when the window is full it waits for
// room, up to the client's timeout. An error means the task was not
// published (invalid, a unique-key conflict, no room in time, ctx ended).
// The returned Pending gives the outcome; EnqueueAsyncComplete tells when
// no publish awaits its acknowledgement. EnqueueBatch is EnqueueAsync for
// each task, then Wait for each. The outcome's Warning comes from the last
// check of the types the workers serve: EnqueueAsync never waits for one.
func (c *Client) EnqueueAsync(ctx context.Context, task Task, opts ...EnqueueOption) (*Pending, error) {
	for _, o := range opts {
		o(&task)
	}
	limit, ok := c.cachedLimit()
	if !ok {
		lookupCtx, cancel := c.withTimeout(ctx)
		_, l, err := c.taskStream(lookupCtx)
		cancel()
		if err != nil {
			return nil, err
		}
		limit = l
	}
	now := time.Now()
	c.served.refresh(ctx, now)
	return c.enqueueAsync(ctx, task, now, limit, nil, nil)
}

// enqueueAsync is EnqueueAsync for a task whose stream limit is known;
// last, when not nil, caches the subject of the previous task.
func (c *Client) enqueueAsync(ctx context.Context, t Task, now time.Time, limit int, last *lastSubject, held map[heldKey]bool) (*Pending, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("task not published: %w", context.Cause(ctx))
	}
	p, err := c.prepare(t, now, limit, last)
	if err != nil {
		return &Pending{id: p.id}, err
	}
	if t.Key != "" && !p.scheduled {
		octx, cancel := c.withTimeout(ctx)
		window, err := c.keyWindow(octx, t.Type, t.Key)
		cancel()
		if err != nil {
			return &Pending{id: p.id}, err
		}
		if window > 0 && held == nil {
			// A task of an ordered or fair key alone is parked and its
			// key started before EnqueueAsync returns, as Enqueue does:
			// nothing would start the key if Wait were never called.
			ectx, cancel := c.withTimeout(ctx)
			defer cancel()
			res, err := c.enqueuePrepared(ectx, t, p)
			if err != nil {
				return &Pending{id: p.id}, err
			}
			res.Warning = c.served.warning(p.typ)
			return &Pending{id: p.id, done: true, res: res}, nil
		}
		if window > 0 {
			limits.Hold(c.names, t.Type, t.Key, p.msg)
			held[heldKey{t.Type, t.Key}] = true
		}
	}
	claimed := false
	if p.uniqueKey != "" {
		uctx, cancel := c.withTimeout(ctx)
		claimed, err = c.claimUnique(uctx, p)
		cancel()
		if err != nil {
			return &Pending{id: p.id}, err
		}
	}
	b, err := c.acks.open(1)
	if err == nil {
		err = c.acks.publish(ctx, b, 0, p, claimed)
		if err != nil {
			c.acks.drop(b)
		}
	}
	if err != nil {
		if ctx.Err() != nil {
			err = fmt.Errorf("task %q not published: %w", p.id, err)
		} else {
			err = fmt.Errorf("publishing task %q to %s: %w", p.id, p.msg.Subject, translate(err))
		}
		if claimed {
			c.releaseUnique(ctx, p.uniqueKey, p.id)
		}
		return &Pending{id: p.id}, err
	}
	return &Pending{c: c, b: b, id: p.id}, nil
}

// Wait returns the task's outcome once its acknowledgement arrived, or
// its publish failed, or ctx ended. A publish whose acknowledgement did
// not come (a leader election swallowed it) is sent again, with the same
// Nats-Msg-Id, within ctx (the client's timeout when ctx has no
// deadline); an error that says "it may be stored" means it still got no
// answer: enqueue the task again with the same id to be sure. Waiting
// again returns the same outcome.
func (p *Pending) Wait(ctx context.Context) (EnqueueResult, error) {
	if p.done {
		return p.res, nil
	}
	if p.b == nil {
		return EnqueueResult{ID: p.id}, fmt.Errorf("task %q was not published", p.id)
	}
	p.once.Do(func() { p.res, p.err = p.c.settleFlight(ctx, p.b) })
	return p.res, p.err
}

// settleFlight waits for the one flight of b and turns it into the task's
// outcome: a lost publish is sent again within ctx, a failed one releases
// its unique key.
func (c *Client) settleFlight(ctx context.Context, b *batch) (EnqueueResult, error) {
	c.acks.wait(ctx, b)
	// The flight is settled and b unregistered, but a sweep that found it
	// overdue just before, or a no-responders republish, may still read
	// it under acks.mu: b's flights are written only under that lock, so
	// the retry's outcome goes to a copy.
	f := b.flights[0]
	// An acknowledged publish had its enqueued event sent as the
	// acknowledgement arrived (acks.stored); one stored by the retry below
	// gets it here.
	if (f.state == lost || f.state == failed) && jsproto.Retryable(f.err) && ctx.Err() == nil {
		retryCtx, cancel := c.withTimeout(ctx)
		ack, err := c.publish(retryCtx, f.p.id, f.p.msg)
		cancel()
		if err == nil {
			f.outcome = outcome{state: acked, seq: ack.Sequence, dup: ack.Duplicate}
			c.enqueued(f.p, f.dup)
		} else {
			f.err = fmt.Errorf("%w; sent again: %w", f.err, err)
		}
	}
	switch f.state {
	case acked:
		res := f.p.result(f.seq, f.dup)
		res.Warning = c.served.warning(f.p.typ)
		return res, nil
	case lost:
		return EnqueueResult{ID: f.p.id}, fmt.Errorf("waiting for the ack of task %q (it may be stored; enqueue it again with the same id): %w",
			f.p.id, f.err)
	}
	if f.claimed {
		c.releaseUnique(ctx, f.p.uniqueKey, f.p.id)
	}
	return EnqueueResult{ID: f.p.id}, fmt.Errorf("publishing task %q to %s: %w", f.p.id, f.p.msg.Subject, translate(f.err))
}

// EnqueueAsyncComplete returns a channel closed once no publish of
// EnqueueAsync or EnqueueBatch awaits its acknowledgement (at once when
// none does). A publish whose acknowledgement does not come is given up
// after the client's timeout.
func (c *Client) EnqueueAsyncComplete() <-chan struct{} { return c.acks.idleCh() }
