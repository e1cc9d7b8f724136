package producer

import (
	"errors"

	"github.com/nats-io/nats.go/jetstream"
)

// isMsgGone reports the "no message found" API error DeleteMsg returns for a
// sequence that was removed meanwhile.
func isMsgGone(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && apiErr.ErrorCode == jetstream.JSErrCodeMessageNotFound
}
