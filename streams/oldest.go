package streams

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// OldestWaiting returns the stream time of the oldest task a consumer has
// not yet delivered, or the zero time when there is none. info is the
// consumer's current info: a priority's consumer or a type's.
func OldestWaiting(ctx context.Context, tasks jetstream.Stream, info *jetstream.ConsumerInfo) (time.Time, error) {
	filter := info.Config.FilterSubject
	msg, err := tasks.GetMsg(ctx, info.Delivered.Stream+1, jetstream.WithGetMsgSubject(filter))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return time.Time{}, nil
	}
	if err != nil {
		return time.Time{}, fmt.Errorf("reading the oldest task on %s: %w", filter, err)
	}
	return msg.Time, nil
}
