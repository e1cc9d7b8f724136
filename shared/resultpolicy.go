package spool

import (
	"fmt"

	"github.com/nats-io/nats.go"
)

// ResultPolicy says whether a worker keeps a task's output: the value of
// the Spool-Result header. The empty policy leaves it to the worker's rule
// for the task's type (consumer.WithDiscardResults), which keeps results
// unless told otherwise.
type ResultPolicy string

// Result policies.
const (
	// KeepResult stores the completed result document, output included,
	// even for a type whose results the worker discards.
	KeepResult ResultPolicy = "keep"
	// DiscardResult stores no result document when the task completes:
	// only a marker (IsDiscardedMarker) that says it completed. Its
	// events, its counters, its failures (retrying, dead with the dead
	// letter) and its cancellation are kept as for any task.
	DiscardResult ResultPolicy = "discard"
)

// ParseResultPolicy parses a result policy: "keep", "discard", or empty
// (the worker's rule).
func ParseResultPolicy(s string) (ResultPolicy, error) {
	p := ResultPolicy(s)
	return p, validateResultPolicy(p)
}

func validateResultPolicy(p ResultPolicy) error {
	switch p {
	case "", KeepResult, DiscardResult:
		return nil
	}
	return NewFieldError(fieldResult, fmt.Errorf("%w: %w: %s %q is not keep or discard",
		ErrInvalidResultPolicy, ErrInvalidHeader, HeaderResult, string(p)))
}

// The marker of a discarded result. A task whose result is discarded
// leaves, in place of its completed result document, a KV delete of its
// key in the results bucket (a message on $KV.<bucket>.<id> with no body
// and KV-Operation: DEL) that also carries Spool-Result: discarded. A KV
// reader sees no document; a reader of the key's last message sees that
// the task completed and its output was not kept.
const (
	// HeaderKVOperation is the header of a KV delete or purge marker.
	HeaderKVOperation = "KV-Operation"
	// KVOperationDelete is its value for a delete.
	KVOperationDelete = "DEL"
	// ResultDiscarded is the value of HeaderResult on the marker.
	ResultDiscarded = "discarded"
)

// SetDiscardedMarker turns h into the header of the marker of a discarded
// result.
func SetDiscardedMarker(h nats.Header) {
	h.Set(HeaderKVOperation, KVOperationDelete)
	h.Set(HeaderResult, ResultDiscarded)
}

// IsDiscardedMarker reports whether a message of the results bucket with
// header h is the marker of a discarded result.
func IsDiscardedMarker(h nats.Header) bool {
	return headerValue(h, HeaderKVOperation) == KVOperationDelete && headerValue(h, HeaderResult) == ResultDiscarded
}
