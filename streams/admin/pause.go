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
// (where workers pull by type, each of its type consumers; one a worker
// makes later joins the pause) delivers nothing, its queued tasks stay queued and no delivery is
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
	// Two passes: a type consumer a worker makes during the first is
	// paused by the second, or, made after the second listing, sees its
	// paused siblings and joins the pause itself.
	for range 2 {
		for _, stream := range parts {
			targets, err := call(ctx, c, "listing the consumers of "+stream, func(ctx context.Context) ([]string, error) {
				return c.pauseTargets(ctx, stream, p)
			})
			if err != nil {
				return time.Time{}, err
			}
			for _, name := range targets {
				resp, err = call(ctx, c, "pausing consumer "+name, func(ctx context.Context) (*jetstream.ConsumerPauseResponse, error) {
					return c.js.PauseConsumer(ctx, stream, name, until)
				})
				if err != nil {
					return time.Time{}, fmt.Errorf("pausing priority %s (consumer %q on %s): %w", p, name, stream, err)
				}
			}
		}
	}
	if resp == nil {
		return time.Time{}, fmt.Errorf("pausing priority %s: workers pull by type and none has started yet, so no consumer of the priority exists to pause: start the workers, then pause", p)
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
		targets, err := call(ctx, c, "listing the consumers of "+stream, func(ctx context.Context) ([]string, error) {
			return c.pauseTargets(ctx, stream, p)
		})
		if err != nil {
			return err
		}
		for _, name := range targets {
			_, err := call(ctx, c, "resuming consumer "+name, func(ctx context.Context) (*jetstream.ConsumerPauseResponse, error) {
				return c.js.ResumeConsumer(ctx, stream, name)
			})
			if err != nil {
				return fmt.Errorf("resuming priority %s (consumer %q on %s): %w", p, name, stream, err)
			}
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
