package admin

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	spool "github.com/spoolq/spool/shared"
)

// Forever is the pause-until time of a pause without an end: the year
// 9999. A priority paused until then stays paused until resumed.
var Forever = time.Date(9999, time.December, 31, 0, 0, 0, 0, time.UTC)

// PausePriority pauses priority p for the whole fleet until until (zero:
// Forever) with JetStream's native consumer pause: the priority's consumer
// delivers nothing, its queued tasks stay queued and no delivery is
// counted; workers stop pulling it within their refresh interval and other
// priorities are not affected. The pause is stored in the consumer's
// configuration, so it survives worker and server restarts (and a
// re-provision). It returns the pause's end as the server holds it.
func (c *Client) PausePriority(ctx context.Context, p spool.Priority, until time.Time) (time.Time, error) {
	if !p.Valid() {
		return time.Time{}, fmt.Errorf("%w: %q", spool.ErrInvalidPriority, p.String())
	}
	if until.IsZero() {
		until = Forever
	}
	if !until.After(time.Now()) {
		return time.Time{}, fmt.Errorf("pause until %s: the time is past, give a later one", until.Format(time.RFC3339))
	}
	resp, err := call(ctx, c, "pausing consumer "+c.names.Consumer(p), func(ctx context.Context) (*jetstream.ConsumerPauseResponse, error) {
		return c.js.PauseConsumer(ctx, c.names.TaskStream(), c.names.Consumer(p), until)
	})
	if err != nil {
		return time.Time{}, fmt.Errorf("pausing priority %s (consumer %q): %w", p, c.names.Consumer(p), err)
	}
	c.logger.InfoContext(ctx, "priority paused", "priority", p.String(), "until", resp.PauseUntil)
	return resp.PauseUntil, nil
}

// ResumePriority resumes priority p: its consumer delivers again at once.
// Resuming a priority that is not paused does nothing.
func (c *Client) ResumePriority(ctx context.Context, p spool.Priority) error {
	if !p.Valid() {
		return fmt.Errorf("%w: %q", spool.ErrInvalidPriority, p.String())
	}
	_, err := call(ctx, c, "resuming consumer "+c.names.Consumer(p), func(ctx context.Context) (*jetstream.ConsumerPauseResponse, error) {
		return c.js.ResumeConsumer(ctx, c.names.TaskStream(), c.names.Consumer(p))
	})
	if err != nil {
		return fmt.Errorf("resuming priority %s (consumer %q): %w", p, c.names.Consumer(p), err)
	}
	c.logger.InfoContext(ctx, "priority resumed", "priority", p.String())
	return nil
}
