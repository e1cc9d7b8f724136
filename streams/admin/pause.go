package admin

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	spool "github.com/spoolq/spool/shared"
)

// Forever is the pause-until time of a pause without an end: the year
// 9999. A priority paused until then stays paused until resumed.
var Forever = time.Date(9999, time.December, 31, 0, 0, 0, 0, time.UTC)

// controlTry bounds each try of a control request: a request swallowed by
// a leader election is sent again while the caller's deadline allows.
const controlTry = 2 * time.Second

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
	var resp *jetstream.ConsumerPauseResponse
	err := c.control(ctx, func(ctx context.Context) error {
		var err error
		resp, err = c.js.PauseConsumer(ctx, c.names.TaskStream(), c.names.Consumer(p), until)
		return err
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
	err := c.control(ctx, func(ctx context.Context) error {
		_, err := c.js.ResumeConsumer(ctx, c.names.TaskStream(), c.names.Consumer(p))
		return err
	})
	if err != nil {
		return fmt.Errorf("resuming priority %s (consumer %q): %w", p, c.names.Consumer(p), err)
	}
	c.logger.InfoContext(ctx, "priority resumed", "priority", p.String())
	return nil
}

// control runs fn with a short timeout per try and tries again, while ctx
// (or the client's timeout) allows, when the request got no answer: a
// JetStream API request in flight during a leader election is swallowed.
func (c *Client) control(ctx context.Context, fn func(context.Context) error) error {
	ctx, cancel := c.withTimeout(ctx)
	defer cancel()
	for {
		tryCtx, tryCancel := context.WithTimeout(ctx, controlTry)
		err := fn(tryCtx)
		tryCancel()
		if err == nil || ctx.Err() != nil || !retryable(err) {
			return err
		}
		c.logger.DebugContext(ctx, "control request unanswered; trying again", "error", err)
		select {
		case <-ctx.Done():
			return err
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func retryable(err error) bool {
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout) ||
		errors.Is(err, nats.ErrNoResponders) || errors.Is(err, jetstream.ErrNoStreamResponse)
}
