package consumer

import "errors"

// The errors of the package, for errors.Is.
var (
	// ErrInvalidOption wraps every option validation failure.
	ErrInvalidOption = errors.New("invalid worker option")
	// ErrStopped is returned by Start after Stop.
	ErrStopped = errors.New("worker stopped")
	// ErrNoHandler is returned by Mux.ProcessTask for a type with no
	// handler, marked Permanent.
	ErrNoHandler = errors.New("no handler for task type")
	// ErrPermanent marks an error that retrying cannot fix (see Permanent).
	ErrPermanent = errors.New("permanent failure")
	// ErrCancelled is the cause of a handler context ended because its
	// task was cancelled (context.Cause(ctx) wraps it).
	ErrCancelled = errors.New("task cancelled")
	// ErrSettled is returned by Task.Progress after the attempt ended: the
	// handler returned, timed out or was cancelled.
	ErrSettled = errors.New("attempt already settled")
)
