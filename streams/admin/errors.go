package admin

import "errors"

var (
	// ErrInvalidOption is wrapped by New's error when an option is invalid.
	ErrInvalidOption = errors.New("invalid admin option")
	// ErrNotConnected means the client's NATS connection is not connected
	// (reconnecting or closed), so nothing can be read.
	ErrNotConnected = errors.New("not connected")
)
