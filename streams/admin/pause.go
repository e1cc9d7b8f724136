package admin

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	spool "github.com/spoolq/spool/shared"
	"github.com/spoolq/spool/streams"
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
	parts, err := c.partitions(ctx)
	if err != nil {
		return time.Time{}, err
	}
	var resp *jetstream.ConsumerPauseResponse
	for _, stream := range parts {
		resp, err = call(ctx, c, "pausing consumer "+c.names.Consumer(p), func(ctx context.Context) (*jetstream.ConsumerPauseResponse, error) {
			return c.js.PauseConsumer(ctx, stream, c.names.Consumer(p), until)
		})
		if err != nil {
			return time.Time{}, fmt.Errorf("pausing priority %s (consumer %q on %s): %w", p, c.names.Consumer(p), stream, err)
		}
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
	parts, err := c.partitions(ctx)
	if err != nil {
		return err
	}
	for _, stream := range parts {
		_, err := call(ctx, c, "resuming consumer "+c.names.Consumer(p), func(ctx context.Context) (*jetstream.ConsumerPauseResponse, error) {
			return c.js.ResumeConsumer(ctx, stream, c.names.Consumer(p))
		})
		if err != nil {
			return fmt.Errorf("resuming priority %s (consumer %q on %s): %w", p, c.names.Consumer(p), stream, err)
		}
	}
	c.logger.InfoContext(ctx, "priority resumed", "priority", p.String())
	return nil
}

// partitions returns the task streams: SPOOL_TASKS, then the partitions
// after it (streams.Settings.Partitions).
func (c *Client) partitions(ctx context.Context) ([]string, error) {
	tasks, err := call(ctx, c, "reading stream "+c.names.TaskStream(), func(ctx context.Context) (jetstream.Stream, error) {
		return c.js.Stream(ctx, c.names.TaskStream())
	})
	if err != nil {
		return nil, fmt.Errorf("reading stream %q: %w", c.names.TaskStream(), err)
	}
	parts := []string{c.names.TaskStream()}
	for k := 1; k < streams.PartitionsOf(tasks.CachedInfo().Config); k++ {
		parts = append(parts, c.names.PartitionStream(k))
	}
	return parts, nil
}
