package admin

import (
	"context"

	"github.com/spoolq/spool/shared/limits"
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
// it within a second.
func (c *Client) SetLimit(ctx context.Context, r limits.Rule) error {
	if err := r.Validate(); err != nil {
		return err
	}
	_, err := withLimits(ctx, c, func(ctx context.Context, st *limits.Store) (struct{}, error) {
		return struct{}{}, st.Put(ctx, r)
	})
	return err
}

// DeleteLimit removes the rule stored under a type or type pattern: its
// types fall to the next matching pattern rule, or run unlimited.
func (c *Client) DeleteLimit(ctx context.Context, name string) error {
	_, err := withLimits(ctx, c, func(ctx context.Context, st *limits.Store) (struct{}, error) {
		return struct{}{}, st.Delete(ctx, name)
	})
	return err
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
