package producer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	spool "github.com/spoolq/spool/shared"
	"github.com/spoolq/spool/shared/jsproto"
)

// enqueued announces a stored task on its enqueued event subject (a core
// publish: lost when nobody listens). A duplicate announces nothing, nor
// does a client made WithEnqueuedEvents(false).
func (c *Client) enqueued(p prepared, dup bool) {
	if dup || c.quiet {
		return
	}
	doc := spool.Result{ID: p.id, Type: p.typ, Priority: p.priority, State: spool.StatePending, EnqueuedAt: time.Now().UTC(), TraceParent: p.msg.Header.Get(spool.HeaderTraceParent)}
	if p.scheduled {
		doc.State = spool.StateScheduled
		at := p.processAt
		doc.NextAttempt = &at
	}
	c.event(spool.EventEnqueued, doc)
}

// event publishes the event of kind about doc; best effort.
func (c *Client) event(kind spool.EventKind, doc spool.Result) {
	b, err := spool.EncodeEvent(kind, time.Now(), doc)
	if err != nil {
		return
	}
	if err := c.nc.Publish(c.names.EventSubject(kind, doc.Priority, doc.ID, doc.Type), b); err != nil {
		c.logger.Debug("publishing an event", "event", string(kind), "task_id", doc.ID, "error", err)
	}
}

// Subscribe calls fn with every event matching f (an empty filter: every
// event) until ctx ends or the returned stop is called. It is one core
// NATS subscription on the event subjects: no JetStream request, so it
// rides out leader elections, and it sees only what happens while it is
// subscribed (events are not stored; the result document is the record).
// fn runs on one goroutine, in the order the events arrive.
func (c *Client) Subscribe(ctx context.Context, f spool.EventFilter, fn func(spool.Event)) (stop func() error, err error) {
	subject, err := c.names.EventFilterSubject(f)
	if err != nil {
		return nil, invalid("filter", err)
	}
	sub, err := c.nc.Subscribe(subject, func(m *nats.Msg) {
		var ev spool.Event
		if err := json.Unmarshal(m.Data, &ev); err != nil {
			c.logger.Debug("undecodable event", "subject", m.Subject, "error", err)
			return
		}
		fn(ev)
	})
	if err != nil {
		return nil, fmt.Errorf("subscribing to events on %q: %w", subject, err)
	}
	// Flush so the subscription is in place when Subscribe returns,
	// retried through the loss of the connection's server.
	fctx, cancel := c.withTimeout(ctx)
	defer cancel()
	if err := c.do(fctx, "subscribing to events on "+subject, func(ctx context.Context) error {
		return jsproto.Flush(ctx, c.nc)
	}); err != nil {
		_ = sub.Unsubscribe()
		return nil, fmt.Errorf("subscribing to events on %q: %w", subject, err)
	}
	done := make(chan struct{})
	go func() {
		select {
		case <-ctx.Done():
			_ = sub.Unsubscribe()
		case <-done:
		}
	}()
	var once sync.Once
	return func() error {
		err := nats.ErrBadSubscription
		once.Do(func() {
			close(done)
			err = sub.Unsubscribe()
		})
		if errors.Is(err, nats.ErrBadSubscription) || errors.Is(err, nats.ErrConnectionClosed) {
			return nil // already gone with ctx or the connection
		}
		return err
	}, nil
}

// Watch returns the events of task id as they happen, ending after a
// terminal one (completed, dead, cancelled) or when ctx ends. The channel
// holds up to 64 events; a reader that falls further behind loses the
// oldest-but-terminal events in between (the terminal event is always
// delivered). Combine it with Result for the state before the watch began.
func (c *Client) Watch(ctx context.Context, id string) (<-chan spool.Event, error) {
	if err := spool.ValidateID(id); err != nil {
		return nil, invalid("id", err)
	}
	ctx, cancel := context.WithCancel(ctx)
	ch := make(chan spool.Event, 64)
	events := make(chan spool.Event, 64)
	stop, err := c.Subscribe(ctx, spool.EventFilter{ID: id}, func(ev spool.Event) {
		if ev.Event.Terminal() {
			select {
			case events <- ev: // waits for room: the terminal event is never dropped
			case <-ctx.Done():
			}
			return
		}
		select {
		case events <- ev:
		default: // reader too slow: drop a non-terminal event
		}
	})
	if err != nil {
		cancel()
		return nil, err
	}
	go func() {
		defer close(ch)
		defer cancel()
		defer func() { _ = stop() }()
		for {
			select {
			case <-ctx.Done():
				return
			case ev := <-events:
				select {
				case ch <- ev:
				case <-ctx.Done():
					return
				}
				if ev.Event.Terminal() {
					return
				}
			}
		}
	}()
	return ch, nil
}
