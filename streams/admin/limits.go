package admin

import (
	"context"

	"github.com/spoolq/spool/shared/limits"
	"github.com/spoolq/spool/streams"
)

// Flow-control rules and their usage, for the broker, the dashboard and
// spool-admin (the contract is in shared/limits).

// Limits returns every flow-control rule with the slots in use across the
// fleet now.
func (c *Client) Limits(ctx context.Context) ([]limits.Usage, error) {
	return withLimits(ctx, c, func(ctx context.Context, st *limits.Store) ([]limits.Usage, error) {
		return st.Usage(ctx)
	})
}

// SetLimit validates r and stores it as the rule of its type or type
// pattern (r.Type; a rule that limits nothing removes it). Workers apply
// it within a second; where they pull by type, the type consumers it caps
// carry its concurrency limit as MaxAckPending at once.
func (c *Client) SetLimit(ctx context.Context, r limits.Rule) error {
	if err := r.Validate(); err != nil {
		return err
	}
	_, err := withLimits(ctx, c, func(ctx context.Context, st *limits.Store) (struct{}, error) {
		if err := st.Put(ctx, r); err != nil {
			return struct{}{}, err
		}
		c.capConsumers(ctx, st)
		return struct{}{}, nil
	})
	return err
}

// DeleteLimit removes the rule stored under a type or type pattern: its
// types fall to the next matching pattern rule, or run unlimited.
func (c *Client) DeleteLimit(ctx context.Context, name string) error {
	_, err := withLimits(ctx, c, func(ctx context.Context, st *limits.Store) (struct{}, error) {
		if err := st.Delete(ctx, name); err != nil {
			return struct{}{}, err
		}
		c.capConsumers(ctx, st)
		return struct{}{}, nil
	})
	return err
}

// capConsumers sets, where workers pull by type, the MaxAckPending of the
// type consumers to the concurrency limits now stored
// (streams.CapConsumers). A failure is logged: the rule is stored, and
// each worker sets the caps of the consumers it pulls as it sees the
// change.
func (c *Client) capConsumers(ctx context.Context, st *limits.Store) {
	if err := streams.CapConsumersFromStore(ctx, c.js, c.names, st); err != nil {
		c.logger.WarnContext(ctx, "setting the concurrency caps of the type consumers; the workers set them", "error", err)
	}
}

// Limit returns the rule stored under a type or type pattern (not the
// rule that governs a type: see ResolveLimit); limits.ErrNoRule when
// none is.
func (c *Client) Limit(ctx context.Context, name string) (limits.Rule, error) {
	return withLimits(ctx, c, func(ctx context.Context, st *limits.Store) (limits.Rule, error) {
		return st.Get(ctx, name)
	})
}

// ResolveLimit returns the rule that governs typ, as stored: the type's
// own, else the most precise pattern rule matching it (its Type is the
// pattern); limits.ErrNoRule when none does.
func (c *Client) ResolveLimit(ctx context.Context, typ string) (limits.Rule, error) {
	return withLimits(ctx, c, func(ctx context.Context, st *limits.Store) (limits.Rule, error) {
		return st.Resolve(ctx, typ)
	})
}

// withLimits runs fn on the deployment's rules store, as read runs a read.
func withLimits[T any](ctx context.Context, c *Client, fn func(context.Context, *limits.Store) (T, error)) (T, error) {
	return read(ctx, c, func(ctx context.Context) (T, error) {
		st, err := limits.Open(ctx, c.js, c.names)
		if err != nil {
			var zero T
			return zero, err
		}
		return fn(ctx, st)
	})
}
