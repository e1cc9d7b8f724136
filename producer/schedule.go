package producer

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	spool "github.com/spoolq/spool/shared"
)

// Cancel removes the pending schedule of delayed task id, so it never runs,
// and releases its unique key if the key still names the task. It reports
// whether there was a pending schedule: false (and no error) when the task
// was never scheduled, has already fired, or was cancelled before. Tasks
// already on their priority subject cannot be cancelled.
func (c *Client) Cancel(ctx context.Context, id string) (bool, error) {
	subject, err := c.names.SchedSubject(id)
	if err != nil {
		return false, invalid("id", err)
	}
	ctx, cancel := c.withTimeout(ctx)
	defer cancel()
	s, _, err := c.taskStream(ctx)
	if err != nil {
		return false, err
	}
	var msg *jetstream.RawStreamMsg
	err = c.do(ctx, "looking up the schedule of task "+id, func(ctx context.Context) (err error) {
		msg, err = s.GetLastMsgForSubject(ctx, subject)
		return err
	})
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("looking up the schedule of task %q: %w", id, err)
	}
	err = c.do(ctx, "deleting the schedule of task "+id, func(ctx context.Context) error {
		return s.DeleteMsg(ctx, msg.Sequence)
	})
	if err != nil {
		if errors.Is(err, jetstream.ErrMsgNotFound) || isMsgGone(err) {
			return false, nil // fired or cancelled meanwhile
		}
		return false, fmt.Errorf("deleting the schedule of task %q (seq %d): %w", id, msg.Sequence, err)
	}
	if key := msg.Header.Get(spool.HeaderUniqueKey); key != "" {
		released, err := c.deleteUniqueIfHeld(ctx, key, id)
		if err != nil {
			return true, fmt.Errorf("task %q cancelled, but releasing its unique key: %w", id, err)
		}
		c.logger.DebugContext(ctx, "unique key of cancelled task", "task_id", id, "unique_key", key, "released", released)
	}
	c.logger.DebugContext(ctx, "scheduled task cancelled", "task_id", id, "seq", msg.Sequence)
	return true, nil
}

// isMsgGone reports the "no message found" API error DeleteMsg returns for a
// sequence that was removed meanwhile.
func isMsgGone(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && apiErr.ErrorCode == jetstream.JSErrCodeMessageNotFound
}
