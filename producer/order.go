package producer

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/spoolq/spool/shared/limits"
)

// ruleTTL is how long the client trusts the flow-control rule of a type it
// read: a rule made ordered applies to its enqueues within a second.
const ruleTTL = time.Second

// orderCache remembers, per task type, whether its rule orders keys.
type orderCache struct {
	rules  jetstream.KeyValue // nil: no limits bucket (looked up again after ruleTTL)
	turns  *limits.Turns
	bound  time.Time
	byType map[string]orderEntry
}

type orderEntry struct {
	ordered bool
	until   time.Time
}

// ordered reports whether the tasks of typ with a Spool-Key go through
// their key's held subject (limits.Rule.Ordered), and the turns to park
// them with. Errors reading the rule are returned: enqueueing such a task
// blind could run it out of order.
func (c *Client) ordered(ctx context.Context, typ string) (*limits.Turns, bool, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := time.Now()
	oc := &c.order
	if e, ok := oc.byType[typ]; ok && now.Before(e.until) {
		return oc.turns, e.ordered, nil
	}
	if oc.rules == nil && now.After(oc.bound) {
		kv, err := c.js.KeyValue(ctx, c.names.LimitsBucket())
		switch {
		case errors.Is(err, jetstream.ErrBucketNotFound):
			oc.bound = now.Add(ruleTTL)
		case err != nil:
			return nil, false, fmt.Errorf("binding the flow-control rules: %w", err)
		default:
			oc.rules = kv
		}
	}
	ordered := false
	if oc.rules != nil {
		e, err := oc.rules.Get(ctx, typ)
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound):
		case err != nil:
			return nil, false, fmt.Errorf("reading the flow-control rule of %q: %w", typ, err)
		default:
			r, err := limits.Decode(typ, e.Value())
			if err != nil {
				return nil, false, err
			}
			ordered = r.Ordered != ""
		}
	}
	if ordered && oc.turns == nil {
		t, err := limits.NewTurns(ctx, c.js, c.names)
		if err != nil {
			return nil, false, err
		}
		oc.turns = t
	}
	if oc.byType == nil {
		oc.byType = map[string]orderEntry{}
	}
	oc.byType[typ] = orderEntry{ordered: ordered, until: now.Add(ruleTTL)}
	return oc.turns, ordered, nil
}

// park publishes a task of an ordered type on its key's held subject
// (see limits.Turns), retried through an election within ctx.
func (c *Client) park(ctx context.Context, turns *limits.Turns, typ, key string, p prepared) (*jetstream.PubAck, error) {
	var ack *jetstream.PubAck
	err := c.do(ctx, "parking task "+p.id, func(ctx context.Context) (err error) {
		ack, err = turns.Park(ctx, typ, key, p.msg.Subject, "", p.msg)
		return err
	})
	return ack, err
}

// heldKey is a key of an ordered type a batch parked tasks of.
type heldKey struct{ typ, key string }

// kickHeld starts the keys a batch parked tasks of. A key left unstarted
// (its start failed) starts at its next park or finish.
func (c *Client) kickHeld(ctx context.Context, held map[heldKey]*limits.Turns) {
	for k, turns := range held {
		err := c.do(ctx, "starting ordered key "+k.key, func(ctx context.Context) error {
			return turns.Kick(ctx, k.typ, k.key)
		})
		if err != nil {
			c.logger.WarnContext(ctx, "tasks parked, their key not started yet", "type", k.typ, "key", k.key, "error", err)
		}
	}
}
