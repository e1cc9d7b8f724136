package streams

import "errors"

var (
	// ErrConflict means an existing JetStream object differs from Spool's
	// topology in a field that cannot be changed in place.
	ErrConflict = errors.New("existing object conflicts with the Spool topology")
	// ErrServerTooOld means the server lacks message scheduling (before 2.12).
	ErrServerTooOld = errors.New("nats-server too old")
	// ErrInvalidSettings wraps a settings validation failure.
	ErrInvalidSettings = errors.New("invalid topology settings")
)
