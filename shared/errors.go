package spool

import "errors"

// Validation errors. Each is wrapped with the offending value, so match them
// with errors.Is.
var (
	ErrInvalidPriority = errors.New("invalid priority")
	ErrInvalidType     = errors.New("invalid task type")
	ErrInvalidID       = errors.New("invalid task id")
	ErrInvalidSubject  = errors.New("invalid subject")
	ErrInvalidPrefix   = errors.New("invalid prefix")
	ErrInvalidHeader   = errors.New("invalid header")
)
