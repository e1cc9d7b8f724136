package jsproto

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go"
)

// Flush makes one round trip to the server on nc: once it returns nil,
// the server holds every subscription made on nc before the call. nats.go
// ends a flush in flight with nats.ErrConnectionClosed when the
// connection drops, even while it reconnects (it closes the pending
// flushes); Flush reports that as nats.ErrDisconnected, which Retryable
// accepts, so a caller retrying it with Tries.Do rides out the loss of
// its server. A connection that is really closed stays an error.
func Flush(ctx context.Context, nc *nats.Conn) error {
	err := nc.FlushWithContext(ctx)
	if errors.Is(err, nats.ErrConnectionClosed) && !nc.IsClosed() {
		return fmt.Errorf("flush cut short by a lost connection: %w", nats.ErrDisconnected)
	}
	return err
}
