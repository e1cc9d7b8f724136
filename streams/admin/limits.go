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

// SetLimit validates r and stores it as its type's rule (a rule that
// limits nothing removes the type's rule). Workers apply it within a
// second.
func (c *Client) SetLimit(ctx context.Context, r limits.Rule) error {
	if err := r.Validate(); err != nil {
		return err
	}
	_, err := withLimits(ctx, c, func(ctx context.Context, st *limits.Store) (struct{}, error) {
		return struct{}{}, st.Put(ctx, r)
	})
	return err
}

// DeleteLimit removes the rule of typ: its tasks run unlimited.
func (c *Client) DeleteLimit(ctx context.Context, typ string) error {
	_, err := withLimits(ctx, c, func(ctx context.Context, st *limits.Store) (struct{}, error) {
		return struct{}{}, st.Delete(ctx, typ)
	})
	return err
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
