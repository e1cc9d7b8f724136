package spool

import (
	"errors"
	"fmt"
)

// Validation errors. Each is wrapped with the offending value, and task
// field errors come in a *FieldError naming the field; match them with
// errors.Is.
var (
	ErrInvalidPriority = errors.New("invalid priority")
	ErrInvalidType     = errors.New("invalid task type")
	ErrInvalidID       = errors.New("invalid task id")
	ErrInvalidSubject  = errors.New("invalid subject")
	ErrInvalidPrefix   = errors.New("invalid prefix")
	// ErrInvalidHeader: a header name or value is malformed or reserved.
	// ErrInvalidMaxRetries, ErrInvalidTimeout and ErrInvalidUnique are
	// header errors too: errors.Is(err, ErrInvalidHeader) holds for them.
	ErrInvalidHeader = errors.New("invalid header")
	// ErrInvalidMaxRetries: max retries is not a whole number from 0 to
	// MaxMaxRetries.
	ErrInvalidMaxRetries = errors.New("invalid max retries")
	// ErrInvalidTimeout: the per-attempt timeout is not a duration, is
	// negative or is above MaxTimeout.
	ErrInvalidTimeout = errors.New("invalid timeout")
	// ErrInvalidUnique: a unique key is too long or holds CR or LF, or its
	// TTL is missing, under 1s or given without a key.
	ErrInvalidUnique = errors.New("invalid unique key")
	// ErrInvalidKey: a flow-control key (Spool-Key) is too long or holds
	// CR or LF.
	ErrInvalidKey = errors.New("invalid key")
	// ErrInvalidResultPolicy: a result policy (Spool-Result) is neither
	// keep nor discard.
	ErrInvalidResultPolicy = errors.New("invalid result policy")
	// ErrInvalidDelay: the delay or process-at time is malformed or
	// negative, or both are set.
	ErrInvalidDelay = errors.New("invalid delay")
	// ErrInvalidPayload: the payload is malformed for its encoding (the
	// HTTP API's payload and payload_base64).
	ErrInvalidPayload = errors.New("invalid payload")
	// ErrPayloadTooLarge: payload plus headers exceed the task stream's
	// maximum message size (or the server's maximum payload).
	ErrPayloadTooLarge = errors.New("task too large")
)

// ErrNotProvisioned: a stream, consumer or KV bucket of Spool's topology
// does not exist; spool-admin provision creates them. A
// *NotProvisionedError names the missing object.
var ErrNotProvisioned = errors.New("spool streams not provisioned (run spool-admin provision)")

// NotProvisionedError names a missing object of the topology. Its message
// is one line with the remedy; errors.Is matches ErrNotProvisioned and the
// JetStream error behind it (jetstream.ErrStreamNotFound, ...).
type NotProvisionedError struct {
	// Kind is "stream", "consumer" or "KV bucket"; Name is the object's.
	Kind, Name string
	// Err is the JetStream error that reported it missing.
	Err error
}

func (e *NotProvisionedError) Error() string {
	return fmt.Sprintf("%s %q does not exist: run spool-admin provision (with the same SPOOL_PREFIX)", e.Kind, e.Name)
}

// Unwrap returns ErrNotProvisioned and the JetStream error.
func (e *NotProvisionedError) Unwrap() []error { return []error{ErrNotProvisioned, e.Err} }
