package admin

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	spool "github.com/spoolq/spool/shared"
	"github.com/spoolq/spool/streams"
)

// Forever is the pause-until time of a pause without an end: the year
// 9999. A priority paused until then stays paused until resumed.
var Forever = streams.PauseForever

// PausePriority pauses priority p for the whole fleet until until (zero:
// Forever) with JetStream's native consumer pause: the priority's consumer
// delivers nothing, its queued tasks stay queued and no delivery is
// counted; workers stop pulling it within their refresh interval and other
// priorities are not affected. The pause is stored in the consumer's
// configuration, so it survives worker and server restarts (and a
// re-provision). Where workers pull by type, the pause is also a record in
// the pause bucket (spool.PriorityPauseKey) and every type consumer of the
// priority is paused, one a worker makes later included. It returns the
// pause's end.
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
	byType, err := call(ctx, c, "reading how workers pull", c.byType)
	if err != nil {
		return time.Time{}, err
	}
	if byType {
		u := until.UTC()
		rec := spool.TypePause{Type: spool.PriorityPauseKey(p), At: time.Now().UTC(), Until: &u}
		if err := c.setPriorityPause(ctx, p, &rec); err != nil {
			return time.Time{}, err
		}
		c.logger.InfoContext(ctx, "priority paused", "priority", p.String(), "until", u)
		return u, nil
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

// ResumePriority resumes priority p: its consumer delivers again at once
// (where workers pull by type, each type consumer of it whose own type is
// not paused). Resuming a priority that is not paused does nothing.
func (c *Client) ResumePriority(ctx context.Context, p spool.Priority) error {
	if !p.Valid() {
		return fmt.Errorf("%w: %q", spool.ErrInvalidPriority, p.String())
	}
	byType, err := call(ctx, c, "reading how workers pull", c.byType)
	if err != nil {
		return err
	}
	if byType {
		if err := c.setPriorityPause(ctx, p, nil); err != nil {
			return err
		}
		c.logger.InfoContext(ctx, "priority resumed", "priority", p.String())
		return nil
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

// setPriorityPause stores (rec) or deletes (nil) priority p's pause record,
// then sets the native pause of its type consumers to match.
func (c *Client) setPriorityPause(ctx context.Context, p spool.Priority, rec *spool.TypePause) error {
	key := spool.PriorityPauseKey(p)
	_, err := call(ctx, c, "recording the pause of priority "+p.String(), func(ctx context.Context) (struct{}, error) {
		kv, err := c.pausedKV(ctx)
		if err != nil {
			return struct{}{}, err
		}
		if rec == nil {
			return struct{}{}, kv.Delete(ctx, key)
		}
		doc, err := json.Marshal(rec)
		if err != nil {
			return struct{}{}, err
		}
		_, err = kv.Put(ctx, key, doc)
		return struct{}{}, err
	})
	if err != nil {
		return fmt.Errorf("recording the pause of priority %s: %w", p, err)
	}
	_, err = call(ctx, c, "pausing the consumers of priority "+p.String(), func(ctx context.Context) (struct{}, error) {
		return struct{}{}, c.syncPauses(ctx, func(q spool.Priority, _ string) bool { return q == p })
	})
	return err
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
