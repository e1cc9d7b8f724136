package streams

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	spool "github.com/spoolq/spool/shared"
)

// OldestWaiting returns the stream time of the oldest task of priority p not
// yet delivered, or the zero time when there is none. info is the priority
// consumer's current info.
func OldestWaiting(ctx context.Context, tasks jetstream.Stream, names spool.Names, p spool.Priority, info *jetstream.ConsumerInfo) (time.Time, error) {
	msg, err := tasks.GetMsg(ctx, info.Delivered.Stream+1, jetstream.WithGetMsgSubject(names.PriorityFilter(p)))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return time.Time{}, nil
	}
	if err != nil {
		return time.Time{}, fmt.Errorf("reading the oldest %s task: %w", p, err)
	}
	return msg.Time, nil
}
