package producer

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/spoolq/spool/shared/limits"
)

// ruleTTL is how long the client trusts the flow-control rule of a type it
// read: a rule made ordered applies to its enqueues within a second.
const ruleTTL = time.Second

// orderCache remembers the flow-control rule of each task type, for the
// types whose keyed tasks are parked (ordered or fair): the rule stored
// under the type, else the most precise pattern rule matching it.
type orderCache struct {
	rules  jetstream.KeyValue // nil: no limits bucket (looked up again after ruleTTL)
	bound  time.Time
	byType map[string]orderEntry
	// patterns holds the pattern rules, read at most once per ruleTTL
	// (limits.Patterns) when a type without a rule of its own is looked
	// up.
	patterns      limits.Set
	patternsUntil time.Time
}

type orderEntry struct {
	rule  limits.Rule
	until time.Time
}

// keyWindow returns the window of key among typ's tasks
// (limits.Rule.KeyWindow; 0: the task is published as usual, >0: it is
// parked on its key's held subject). Errors reading the rule are
// returned: enqueueing such a task blind could run it out of order.
func (c *Client) keyWindow(ctx context.Context, typ, key string) (int, error) {
	rule, err := c.rule(ctx, typ)
	if err != nil {
		return 0, err
	}
	return rule.KeyWindow(key), nil
}

func (c *Client) rule(ctx context.Context, typ string) (limits.Rule, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := time.Now()
	oc := &c.order
	if e, ok := oc.byType[typ]; ok && now.Before(e.until) {
		return e.rule, nil
	}
	if oc.rules == nil && now.After(oc.bound) {
		kv, err := c.js.KeyValue(ctx, c.names.LimitsBucket())
		switch {
		case errors.Is(err, jetstream.ErrBucketNotFound):
			oc.bound = now.Add(ruleTTL)
		case err != nil:
			return limits.Rule{}, fmt.Errorf("binding the flow-control rules: %w", err)
		default:
			oc.rules = kv
		}
	}
	var rule limits.Rule
	if oc.rules != nil {
		e, err := oc.rules.Get(ctx, typ)
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound):
			if rule, err = c.patternRule(ctx, typ, now); err != nil {
				return limits.Rule{}, err
			}
		case err != nil:
			return limits.Rule{}, fmt.Errorf("reading the flow-control rule of %q: %w", typ, err)
		default:
			if rule, err = limits.Decode(typ, e.Value()); err != nil {
				return limits.Rule{}, err
			}
		}
	}
	if oc.byType == nil {
		oc.byType = map[string]orderEntry{}
	}
	oc.byType[typ] = orderEntry{rule: rule, until: now.Add(ruleTTL)}
	return rule, nil
}

// patternRule returns the most precise pattern rule matching typ (with
// Type typ), or the zero rule; c.mu is held.
func (c *Client) patternRule(ctx context.Context, typ string, now time.Time) (limits.Rule, error) {
	oc := &c.order
	if now.After(oc.patternsUntil) {
		var rules []limits.Rule
		err := c.do(ctx, "reading the flow-control pattern rules", func(ctx context.Context) (err error) {
			rules, err = limits.Patterns(ctx, c.js, c.names.LimitsBucket())
			return err
		})
		if err != nil {
			return limits.Rule{}, fmt.Errorf("reading the flow-control rules: %w", err)
		}
		oc.patterns = limits.Set{}
		for _, r := range rules {
			oc.patterns.Put(r)
		}
		oc.patternsUntil = now.Add(ruleTTL)
	}
	rule, ok := oc.patterns.Match(typ)
	if !ok {
		return limits.Rule{}, nil
	}
	return rule.For(typ), nil
}

// park publishes a task of an ordered or fair type on its key's held
// subject (limits.Hold), retried through an election within ctx, and then
// asks the fleet to start the key (kick).
func (c *Client) park(ctx context.Context, typ, key string, p prepared) (*jetstream.PubAck, error) {
	m := &nats.Msg{Subject: p.msg.Subject, Header: p.msg.Header, Data: p.msg.Data}
	limits.Hold(c.names, typ, key, m)
	ack, err := c.publish(ctx, p.id, m)
	if err != nil {
		return nil, err
	}
	c.kick(ctx, typ, key)
	return ack, nil
}

// heldKey is a key a batch parked tasks of.
type heldKey struct{ typ, key string }

// kick asks the fleet to release the key's held tasks while its window
// has room: a core publish on the key's kick subject, which one worker
// takes (Names.KickSubject). A kick that no worker hears (none runs) is
// made up for by the workers' sweep of held keys.
func (c *Client) kick(ctx context.Context, typ, key string) {
	if err := c.nc.Publish(c.names.KickSubject(limits.EncodeKey(key), typ), nil); err != nil {
		c.logger.WarnContext(ctx, "task parked, its key not started yet", "type", typ, "key", key, "error", err)
	}
}
