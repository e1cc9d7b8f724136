package admin

import (
	"context"

	"github.com/spoolq/spool/streams/dlq"
)

// The dead-letter operations are package dlq's on the client's connection
// and names; their errors are dlq's (dlq.ErrNotFound, dlq.ErrInvalidFilter,
// dlq.ErrNoFilter, dlq.ErrNotReplayable). Each rides out a leader election
// (see call). A retried replay publishes the same Nats-Msg-Id, so it is
// stored once; when the first try's answer was lost after it removed the
// dead letter, the retry reports dlq.ErrNotFound.

// DeadLetters returns the first page of dead letters matching f, oldest
// first; f.After pages on (dlq.Page.Next).
func (c *Client) DeadLetters(ctx context.Context, f dlq.Filter) (dlq.Page, error) {
	return call(ctx, c, "listing dead letters", func(ctx context.Context) (dlq.Page, error) { return c.dlq.List(ctx, f) })
}

// DeadLetter returns the dead letter with DLQ sequence seq.
func (c *Client) DeadLetter(ctx context.Context, seq uint64) (dlq.Letter, error) {
	return call(ctx, c, "reading a dead letter", func(ctx context.Context) (dlq.Letter, error) { return c.dlq.Get(ctx, seq) })
}

// Replay sends dead letter seq back to the subject it died on, its
// attempts reset, and removes it from the dead-letter stream.
func (c *Client) Replay(ctx context.Context, seq uint64) (dlq.Replayed, error) {
	return call(ctx, c, "replaying a dead letter", func(ctx context.Context) (dlq.Replayed, error) { return c.dlq.Replay(ctx, seq) })
}

// Purge deletes the dead letters matching f, or every one when all is set,
// and returns how many it deleted; f must select something unless all is
// set.
func (c *Client) Purge(ctx context.Context, f dlq.Filter, all bool) (uint64, error) {
	return call(ctx, c, "purging dead letters", func(ctx context.Context) (uint64, error) { return c.dlq.Purge(ctx, f, all) })
}
