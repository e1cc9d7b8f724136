package consumer

import "errors"

var (
	// ErrInvalidOption wraps every option validation failure.
	ErrInvalidOption = errors.New("invalid worker option")
	// ErrStopped is returned by Start after Stop.
	ErrStopped = errors.New("worker stopped")
)
