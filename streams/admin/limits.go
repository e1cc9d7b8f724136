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
	return read(ctx, c, func(ctx context.Context) ([]limits.Usage, error) {
		st, err := limits.Open(ctx, c.js, c.names)
		if err != nil {
			return nil, err
		}
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
	_, err := read(ctx, c, func(ctx context.Context) (struct{}, error) {
		st, err := limits.Open(ctx, c.js, c.names)
		if err != nil {
			return struct{}{}, err
		}
		return struct{}{}, st.Put(ctx, r)
	})
	return err
}

// DeleteLimit removes the rule of typ: its tasks run unlimited.
func (c *Client) DeleteLimit(ctx context.Context, typ string) error {
	_, err := read(ctx, c, func(ctx context.Context) (struct{}, error) {
		st, err := limits.Open(ctx, c.js, c.names)
		if err != nil {
			return struct{}{}, err
		}
		return struct{}{}, st.Delete(ctx, typ)
	})
	return err
}
