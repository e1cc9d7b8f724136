package streams

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	spool "github.com/spoolq/spool/shared"
)

// FindQueued looks for task id among the tasks in the task stream (queued,
// or delivered and not yet acked), oldest first, by its Spool-Task-Id or
// Nats-Msg-Id header. It returns the task's message, or nil when no task
// carries the id. It reads one message per request, so it takes as long as
// the backlog is deep: bound it with ctx.
func FindQueued(ctx context.Context, tasks jetstream.Stream, names spool.Names, id string) (*jetstream.RawStreamMsg, error) {
	filter := names.Prefix() + ".tasks.>"
	seq, scanned := uint64(1), 0
	for {
		msg, err := tasks.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(filter))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return nil, nil
		}
		if err != nil {
			return nil, fmt.Errorf("looking for task %q in %s (%d tasks read): %w", id, tasks.CachedInfo().Config.Name, scanned, err)
		}
		scanned++
		if msg.Header.Get(spool.HeaderTaskID) == id || msg.Header.Get(spool.HeaderMsgID) == id {
			return msg, nil
		}
		seq = msg.Sequence + 1
	}
}
