package producer

import (
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	spool "github.com/spoolq/spool/shared"
)

// Validation errors, returned before anything is published: the rules and
// sentinels of spool.TaskFields. Each comes wrapped in a *spool.FieldError
// (InvalidTaskError) naming the field and its code; match with errors.Is.
var (
	// ErrInvalidPriority: the priority is not one of the five.
	ErrInvalidPriority = spool.ErrInvalidPriority
	// ErrInvalidType: the type is not dot-separated tokens of [A-Za-z0-9_-].
	ErrInvalidType = spool.ErrInvalidType
	// ErrInvalidID: the id is not 1 to 128 characters of [A-Za-z0-9_=-].
	ErrInvalidID = spool.ErrInvalidID
	// ErrInvalidHeader: a header name or value is malformed or reserved.
	// ErrInvalidMaxRetries, ErrInvalidTimeout and ErrInvalidUnique are
	// header errors too: errors.Is(err, ErrInvalidHeader) holds for them.
	ErrInvalidHeader = spool.ErrInvalidHeader
	// ErrInvalidMaxRetries: max retries is outside 0 to spool.MaxMaxRetries.
	ErrInvalidMaxRetries = spool.ErrInvalidMaxRetries
	// ErrInvalidTimeout: the per-attempt timeout is negative or above
	// spool.MaxTimeout.
	ErrInvalidTimeout = spool.ErrInvalidTimeout
	// ErrInvalidUnique: a unique key is too long, or its TTL is missing,
	// under 1s or given without a key.
	ErrInvalidUnique = spool.ErrInvalidUnique
	// ErrInvalidDelay: the delay is negative, or both a delay and a
	// process-at time are set.
	ErrInvalidDelay = spool.ErrInvalidDelay
	// ErrPayloadTooLarge: payload plus headers exceed the task stream's
	// maximum message size (or the server's maximum payload).
	ErrPayloadTooLarge = spool.ErrPayloadTooLarge
)

// Errors from JetStream, translated.
var (
	// ErrQueueFull: JetStream refused the publish because its storage is
	// exhausted. The task was not enqueued; tasks already queued are intact.
	// Retry later.
	ErrQueueFull = errors.New("queue full: JetStream storage exhausted")
	// ErrUniqueConflict: another live task holds the unique key. The error
	// is a *UniqueConflictError carrying that task's id.
	ErrUniqueConflict = errors.New("unique key held by another task")
	// ErrTaskNotFound: no result document exists for the id (no consumer
	// has picked the task up yet: it is queued, or parked, held or in a
	// waiting room; it expired; or there never was such a task).
	ErrTaskNotFound = errors.New("task not found")
	// ErrResultDiscarded: the task completed and its result was discarded
	// (spool.DiscardResult, or the worker's rule for its type): nothing
	// but the marker that it completed is kept, so there is no document to
	// return. The error is a *ResultDiscardedError. Its events and counters
	// saw the completion as any task's.
	ErrResultDiscarded = errors.New("result discarded")
	// ErrTaskFinished: Cancel found the task already in a terminal state
	// (completed, dead or cancelled); nothing was changed.
	ErrTaskFinished = errors.New("task already finished")
	// ErrNotProvisioned: Spool's task stream or a bucket does not exist;
	// run spool-admin provision.
	// The error is a *spool.NotProvisionedError where the object is known.
	ErrNotProvisioned = spool.ErrNotProvisioned
	// ErrInvalidDocument: a stored result document cannot be decoded
	// (something outside the contract wrote it, such as NaN from a worker
	// in another language). The error is a *spool.DocumentError naming the
	// task, the field and the byte offset.
	ErrInvalidDocument = spool.ErrInvalidDocument
)

// TaskNotFoundError is ErrTaskNotFound for one id: its message is one
// line; errors.Is(err, ErrTaskNotFound) holds.
type TaskNotFoundError struct {
	// ID is the task id asked for.
	ID string
}

func (e *TaskNotFoundError) Error() string {
	return fmt.Sprintf("task %q has no result document and no pending schedule: the id is unknown, its result expired, or no worker has picked it up yet", e.ID)
}

// Is reports whether target is ErrTaskNotFound.
func (e *TaskNotFoundError) Is(target error) bool { return target == ErrTaskNotFound }

// ResultDiscardedError is ErrResultDiscarded for one task: it completed,
// and its result was not kept. errors.Is(err, ErrResultDiscarded) holds.
type ResultDiscardedError struct {
	// ID is the task id asked for.
	ID string
	// CompletedAt is when the marker of its completion was stored.
	CompletedAt time.Time
}

func (e *ResultDiscardedError) Error() string {
	return fmt.Sprintf("task %q completed at %s and its result was discarded (Spool-Result: discard): no result document is kept",
		e.ID, e.CompletedAt.UTC().Format(time.RFC3339))
}

// Is reports whether target is ErrResultDiscarded.
func (e *ResultDiscardedError) Is(target error) bool { return target == ErrResultDiscarded }

// InvalidTaskError is the validation error of a task: spool.FieldError,
// whose Field is the JSON name used by the HTTP API (type, priority, id,
// payload, max_retries, timeout, unique_key, unique_ttl, process_at, delay,
// headers, traceparent, tracestate), Code the broker's error code for it,
// and Err one of the validation sentinels.
type InvalidTaskError = spool.FieldError

// invalid returns the validation error of field, coded after its sentinel.
func invalid(field string, err error) error { return spool.NewFieldError(field, err) }

// UniqueConflictError is returned when a live task already holds a unique
// key. errors.Is(err, ErrUniqueConflict) holds.
type UniqueConflictError struct {
	// Key is the unique key asked for.
	Key string
	// ExistingID is the id of the task holding it.
	ExistingID string
}

func (e *UniqueConflictError) Error() string {
	return fmt.Sprintf("unique key %q is held by task %q until it finishes or the key's TTL ends", e.Key, e.ExistingID)
}

// Is makes errors.Is(err, ErrUniqueConflict) hold.
func (e *UniqueConflictError) Is(target error) bool { return target == ErrUniqueConflict }

// storageErrorCodes are the JetStream error codes that mean storage is
// exhausted (nats-server server/errors.json).
var storageErrorCodes = map[jetstream.ErrorCode]bool{
	10002: true, // JSAccountResourcesExceededErr: resource limits exceeded for account
	10023: true, // JSInsufficientResourcesErr: insufficient resources
	10028: true, // JSMemoryResourcesExceededErr: insufficient memory resources available
	10047: true, // JSStorageResourcesExceededErr: insufficient storage resources available
}

// translate maps JetStream publish errors to the package's sentinels, keeping
// the original in the chain.
func translate(err error) error {
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) {
		switch {
		case storageErrorCodes[apiErr.ErrorCode]:
			return fmt.Errorf("%w: %w", ErrQueueFull, err)
		case apiErr.ErrorCode == jetstream.JSErrCodeStreamMessageExceedsMaximum:
			return fmt.Errorf("%w: %w", ErrPayloadTooLarge, err)
		}
	}
	if errors.Is(err, jetstream.ErrNoStreamResponse) || errors.Is(err, jetstream.ErrStreamNotFound) {
		return fmt.Errorf("%w: %w", ErrNotProvisioned, err)
	}
	return err
}
