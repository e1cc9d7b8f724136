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

// orderCache remembers the flow-control rule of each task type, for the
// types whose keyed tasks are parked (ordered or fair).
type orderCache struct {
	rules  jetstream.KeyValue // nil: no limits bucket (looked up again after ruleTTL)
	turns  *limits.Turns
	bound  time.Time
	byType map[string]orderEntry
}

type orderEntry struct {
	rule  limits.Rule
	until time.Time
}

// keyWindow returns the window of key among typ's tasks
// (limits.Rule.KeyWindow; 0: the task is published as usual, >0: it is
// parked on its key's held subject) and the turns to park it with. Errors
// reading the rule are returned: enqueueing such a task blind could run it
// out of order.
func (c *Client) keyWindow(ctx context.Context, typ, key string) (*limits.Turns, int, error) {
	turns, rule, err := c.rule(ctx, typ)
	if err != nil {
		return nil, 0, err
	}
	return turns, rule.KeyWindow(key), nil
}

func (c *Client) rule(ctx context.Context, typ string) (*limits.Turns, limits.Rule, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := time.Now()
	oc := &c.order
	if e, ok := oc.byType[typ]; ok && now.Before(e.until) {
		return oc.turns, e.rule, nil
	}
	if oc.rules == nil && now.After(oc.bound) {
		kv, err := c.js.KeyValue(ctx, c.names.LimitsBucket())
		switch {
		case errors.Is(err, jetstream.ErrBucketNotFound):
			oc.bound = now.Add(ruleTTL)
		case err != nil:
			return nil, limits.Rule{}, fmt.Errorf("binding the flow-control rules: %w", err)
		default:
			oc.rules = kv
		}
	}
	var rule limits.Rule
	if oc.rules != nil {
		e, err := oc.rules.Get(ctx, typ)
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound):
		case err != nil:
			return nil, limits.Rule{}, fmt.Errorf("reading the flow-control rule of %q: %w", typ, err)
		default:
			if rule, err = limits.Decode(typ, e.Value()); err != nil {
				return nil, limits.Rule{}, err
			}
		}
	}
	if (rule.Ordered != "" || rule.Fair != nil) && oc.turns == nil {
		t, err := limits.NewTurns(ctx, c.js, c.names)
		if err != nil {
			return nil, limits.Rule{}, err
		}
		oc.turns = t
	}
	if oc.byType == nil {
		oc.byType = map[string]orderEntry{}
	}
	oc.byType[typ] = orderEntry{rule: rule, until: now.Add(ruleTTL)}
	return oc.turns, rule, nil
}

// park publishes a task of an ordered or fair type on its key's held
// subject (see limits.Turns), retried through an election within ctx.
func (c *Client) park(ctx context.Context, turns *limits.Turns, typ, key string, window int, p prepared) (*jetstream.PubAck, error) {
	var ack *jetstream.PubAck
	err := c.do(ctx, "parking task "+p.id, func(ctx context.Context) (err error) {
		ack, err = turns.Park(ctx, typ, key, window, p.msg.Subject, "", p.msg)
		return err
	})
	return ack, err
}

// heldKey is a key a batch parked tasks of, with its window.
type heldKey struct {
	typ, key string
	window   int
}

// kickHeld starts the keys a batch parked tasks of. A key left unstarted
// (its start failed) starts at its next park or finish.
func (c *Client) kickHeld(ctx context.Context, held map[heldKey]*limits.Turns) {
	for k, turns := range held {
		err := c.do(ctx, "starting key "+k.key, func(ctx context.Context) error {
			return turns.Kick(ctx, k.typ, k.key, k.window)
		})
		if err != nil {
			c.logger.WarnContext(ctx, "tasks parked, their key not started yet", "type", k.typ, "key", k.key, "error", err)
		}
	}
}
