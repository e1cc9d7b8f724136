package spool

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
)

// Error codes of task validation. They are stable, and the same wherever a
// task field is checked: the Go library, the HTTP broker (the code of its
// JSON error answers), the producer CLI and the consumer's header decoding.
const (
	CodeInvalidPriority     = "invalid_priority"
	CodeInvalidType         = "invalid_type"
	CodeInvalidID           = "invalid_id"
	CodeInvalidHeader       = "invalid_header"
	CodeInvalidMaxRetries   = "invalid_max_retries"
	CodeInvalidTimeout      = "invalid_timeout"
	CodeInvalidUnique       = "invalid_unique"
	CodeInvalidKey          = "invalid_key"
	CodeInvalidResultPolicy = "invalid_result_policy"
	CodeInvalidDelay        = "invalid_delay"
	CodeInvalidPayload      = "invalid_payload"
	CodePayloadTooLarge     = "payload_too_large"
)

// codes maps the validation sentinels to their codes, most specific first:
// the header kinds also match ErrInvalidHeader.
var codes = [...]struct {
	err  error
	code string
}{
	{ErrInvalidPriority, CodeInvalidPriority},
	{ErrInvalidType, CodeInvalidType},
	{ErrInvalidID, CodeInvalidID},
	{ErrInvalidMaxRetries, CodeInvalidMaxRetries},
	{ErrInvalidTimeout, CodeInvalidTimeout},
	{ErrInvalidUnique, CodeInvalidUnique},
	{ErrInvalidKey, CodeInvalidKey},
	{ErrInvalidResultPolicy, CodeInvalidResultPolicy},
	{ErrInvalidDelay, CodeInvalidDelay},
	{ErrInvalidPayload, CodeInvalidPayload},
	{ErrPayloadTooLarge, CodePayloadTooLarge},
	{ErrInvalidHeader, CodeInvalidHeader},
}

// The task fields, named as in the HTTP API's JSON.
const (
	fieldType        = "type"
	fieldPriority    = "priority"
	fieldID          = "id"
	fieldPayload     = "payload"
	fieldMaxRetries  = "max_retries"
	fieldTimeout     = "timeout"
	fieldUniqueKey   = "unique_key"
	fieldUniqueTTL   = "unique_ttl"
	fieldKey         = "key"
	fieldResult      = "result_policy"
	fieldFlow        = "headers" // Spool-Prior-Attempts, Spool-Deferrals: set by workers only
	fieldProcessAt   = "process_at"
	fieldDelay       = "delay"
	fieldHeaders     = "headers"
	fieldTraceParent = HeaderTraceParent
	fieldTraceState  = HeaderTraceState
)

// FieldError says which task field failed validation, with a stable code.
// Every entry point (the Go library, the HTTP broker, the producer CLI and
// the consumer's DecodeMeta) returns it, so one bad value gets one code.
type FieldError struct {
	// Field is the field's JSON name in the HTTP API: type, priority, id,
	// payload, payload_base64, max_retries, timeout, unique_key,
	// unique_ttl, key, result_policy, process_at, delay, headers,
	// traceparent or tracestate.
	Field string
	// Code is the stable error code of the broker's JSON answers
	// (CodeInvalidType, ...), that of the sentinel Err wraps.
	Code string
	// Err wraps one of the validation sentinels (ErrInvalidType, ...).
	Err error
}

// NewFieldError returns the error of field, coded after the validation
// sentinel that err wraps (the most specific one: ErrInvalidTimeout before
// ErrInvalidHeader).
func NewFieldError(field string, err error) *FieldError {
	code := ErrorCode(err)
	if code == "" {
		code = "invalid_" + field
	}
	return &FieldError{Field: field, Code: code, Err: err}
}

// ErrorCode returns the code of the most specific validation sentinel err
// wraps (CodeInvalidTimeout before CodeInvalidHeader), or "" when it wraps
// none.
func ErrorCode(err error) string {
	var fe *FieldError
	if errors.As(err, &fe) {
		return fe.Code
	}
	for _, c := range codes {
		if errors.Is(err, c.err) {
			return c.code
		}
	}
	return ""
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Err.Error() }

// Reason is the error in the terms of the task's fields, without the
// sentinel wording or the header names Error keeps for the wire:
// "-1 must be 0 to 1000" where Error says "invalid max retries: invalid
// header: Spool-Max-Retries -1 must be 0 to 1000". The broker's answers
// and the producer CLI print "<field>: <reason>".
func (e *FieldError) Reason() string {
	msg := Detail(e.Err)
	for header, field := range fieldOfHeader {
		msg = strings.ReplaceAll(msg, header, field)
	}
	msg = strings.TrimPrefix(msg, e.Field+" ")
	if msg == "empty" {
		return "must not be empty"
	}
	return msg
}

// Detail is a validation error's message without the sentinels' wording
// in front: `"urgent" is not one of critical, ...` where Error says
// `invalid priority: "urgent" is not one of critical, ...`, for messages
// that name the flag, variable or field themselves.
func Detail(err error) string {
	msg := err.Error()
	for trimmed := true; trimmed; {
		trimmed = false
		for _, c := range codes {
			if rest, ok := strings.CutPrefix(msg, c.err.Error()+": "); ok {
				msg, trimmed = rest, true
			}
		}
	}
	return msg
}

// fieldOfHeader maps the headers that carry task fields to the fields'
// names.
var fieldOfHeader = map[string]string{
	HeaderMaxRetries: fieldMaxRetries,
	HeaderTimeout:    fieldTimeout,
	HeaderUniqueKey:  fieldUniqueKey,
	HeaderUniqueTTL:  fieldUniqueTTL,
	HeaderResult:     fieldResult,
}

// Unwrap returns the underlying validation error.
func (e *FieldError) Unwrap() error { return e.Err }

// maxTraceLen bounds the traceparent and tracestate values of a task.
const maxTraceLen = 512

// TaskFields are the fields of a task to enqueue, as the Go library, the
// HTTP broker and the producer CLI receive them. Validate holds the rules
// they share; the consumer checks the Meta part again, with the same rules
// and codes, when it decodes a task (DecodeMeta).
type TaskFields struct {
	// Type names the handler: dot-separated tokens of [A-Za-z0-9_-].
	Type string
	// Priority is one of the five priorities.
	Priority Priority
	// Meta holds the fields that travel in headers; its ID, if set, is
	// the task id.
	Meta Meta
	// Delay and ProcessAt delay the task; set at most one.
	Delay     time.Duration
	ProcessAt time.Time
	// Headers are extra headers: HTTP-style token names, none of the
	// reserved ones (Nats-*, Spool-*, traceparent, tracestate), values
	// without CR or LF.
	Headers map[string]string
}

// Validate checks the fields in order (priority, type, id, max retries,
// timeout, key, result policy, unique key and TTL, trace context, delay,
// headers) and returns a
// *FieldError for the first one at fault.
func (f TaskFields) Validate() error {
	if !f.Priority.Valid() {
		return NewFieldError(fieldPriority, fmt.Errorf("%w: %d (want spool.Critical to spool.Idle)", ErrInvalidPriority, int(f.Priority)))
	}
	if err := ValidateType(f.Type); err != nil {
		return NewFieldError(fieldType, err)
	}
	if err := f.Meta.Validate(); err != nil {
		return err
	}
	if err := validateTrace(fieldTraceParent, f.Meta.TraceParent); err != nil {
		return err
	}
	if err := validateTrace(fieldTraceState, f.Meta.TraceState); err != nil {
		return err
	}
	switch {
	case f.Delay < 0:
		return NewFieldError(fieldDelay, fmt.Errorf("%w: %s is negative", ErrInvalidDelay, f.Delay))
	case f.Delay > 0 && !f.ProcessAt.IsZero():
		return NewFieldError(fieldDelay, fmt.Errorf("%w: set a delay or a process-at time, not both", ErrInvalidDelay))
	}
	for k, v := range f.Headers {
		if err := validateExtraHeader(k, v); err != nil {
			return NewFieldError(fieldHeaders, err)
		}
	}
	return nil
}

// validateMaxRetries, validateTimeout and validateUnique are the rules of
// the Meta fields, shared by Meta.Validate and so by TaskFields.Validate.
func validateMaxRetries(n *int) error {
	if n != nil && (*n < 0 || *n > MaxMaxRetries) {
		return NewFieldError(fieldMaxRetries, fmt.Errorf("%w: %w: %s %d must be 0 to %d",
			ErrInvalidMaxRetries, ErrInvalidHeader, HeaderMaxRetries, *n, MaxMaxRetries))
	}
	return nil
}

func validateTimeout(d time.Duration) error {
	if d < 0 || d > MaxTimeout {
		return NewFieldError(fieldTimeout, fmt.Errorf("%w: %w: %s %s must be positive and at most %s",
			ErrInvalidTimeout, ErrInvalidHeader, HeaderTimeout, d, MaxTimeout))
	}
	return nil
}

// validateKey checks a flow-control key (Spool-Key): any bytes but CR and
// LF, at most MaxKeyLen.
func validateKey(key string) error {
	switch {
	case len(key) > MaxKeyLen:
		return NewFieldError(fieldKey, fmt.Errorf("%w: %w: %s is %d bytes, at most %d",
			ErrInvalidKey, ErrInvalidHeader, HeaderKey, len(key), MaxKeyLen))
	case strings.ContainsAny(key, "\r\n"):
		return NewFieldError(fieldKey, fmt.Errorf("%w: %w: %s contains CR or LF", ErrInvalidKey, ErrInvalidHeader, HeaderKey))
	}
	return nil
}

// validateFlowCounts checks the counts a worker's flow-control hand-back
// writes (Spool-Prior-Attempts, Spool-Deferrals).
func validateFlowCounts(prior, deferrals int) error {
	const maxCount = 1 << 30
	if prior < 0 || prior > maxCount || deferrals < 0 || deferrals > maxCount {
		return NewFieldError(fieldFlow, fmt.Errorf("%w: %s %d and %s %d must be 0 to %d",
			ErrInvalidHeader, HeaderPriorAttempts, prior, HeaderDeferrals, deferrals, maxCount))
	}
	return nil
}

func validateUnique(key string, ttl time.Duration) error {
	switch {
	case len(key) > MaxUniqueKeyLen:
		return NewFieldError(fieldUniqueKey, fmt.Errorf("%w: %w: %s is %d bytes, at most %d",
			ErrInvalidUnique, ErrInvalidHeader, HeaderUniqueKey, len(key), MaxUniqueKeyLen))
	case strings.ContainsAny(key, "\r\n"):
		return NewFieldError(fieldUniqueKey, fmt.Errorf("%w: %w: %s contains CR or LF", ErrInvalidUnique, ErrInvalidHeader, HeaderUniqueKey))
	case ttl < 0:
		return NewFieldError(fieldUniqueTTL, fmt.Errorf("%w: %w: %s %s is negative", ErrInvalidUnique, ErrInvalidHeader, HeaderUniqueTTL, ttl))
	case ttl > 0 && key == "":
		return NewFieldError(fieldUniqueKey, fmt.Errorf("%w: %w: %s without %s", ErrInvalidUnique, ErrInvalidHeader, HeaderUniqueTTL, HeaderUniqueKey))
	case key != "" && ttl < time.Second:
		return NewFieldError(fieldUniqueTTL, fmt.Errorf("%w: %w: %s needs %s of at least 1s, got %s",
			ErrInvalidUnique, ErrInvalidHeader, HeaderUniqueKey, HeaderUniqueTTL, ttl))
	}
	return nil
}

// validateTrace checks a traceparent or tracestate value before it is
// written into a header. The consumer passes trace context on as given and
// never refuses a task for it.
func validateTrace(field, v string) error {
	if len(v) > maxTraceLen {
		return NewFieldError(field, fmt.Errorf("%w: %s is %d bytes, at most %d", ErrInvalidHeader, field, len(v), maxTraceLen))
	}
	if strings.ContainsAny(v, "\r\n") {
		return NewFieldError(field, fmt.Errorf("%w: %s contains CR or LF", ErrInvalidHeader, field))
	}
	return nil
}

// validateExtraHeader checks one caller-supplied header.
func validateExtraHeader(k, v string) error {
	if k == "" {
		return fmt.Errorf("%w: empty header name", ErrInvalidHeader)
	}
	for i := 0; i < len(k); i++ {
		if !isHeaderNameChar(k[i]) {
			return fmt.Errorf("%w: header name %q has %q (allowed: letters, digits and !#$%%&'*+-.^_`|~)", ErrInvalidHeader, k, k[i])
		}
	}
	lk := strings.ToLower(k)
	if strings.HasPrefix(lk, "nats-") || strings.HasPrefix(lk, "spool-") || lk == HeaderTraceParent || lk == HeaderTraceState {
		return fmt.Errorf("%w: header %q is reserved (Nats-*, Spool-*, traceparent and tracestate are set from task fields)", ErrInvalidHeader, k)
	}
	if strings.ContainsAny(v, "\r\n") {
		return fmt.Errorf("%w: value of header %q contains CR or LF", ErrInvalidHeader, k)
	}
	return nil
}

func isHeaderNameChar(c byte) bool {
	if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' {
		return true
	}
	return strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}

// ValidateMsgSize checks a task message against limit, the largest message
// (payload plus headers) the task stream accepts, as JetStream counts it.
func ValidateMsgSize(msg *nats.Msg, limit int) error {
	if size := msgSize(msg); size > limit {
		return NewFieldError(fieldPayload, fmt.Errorf("%w: %d bytes of payload and %d of headers exceed the limit of %d bytes",
			ErrPayloadTooLarge, len(msg.Data), size-len(msg.Data), limit))
	}
	return nil
}

// msgSize is the size JetStream checks against the stream's max message
// size: the encoded headers plus the payload.
func msgSize(m *nats.Msg) int {
	n := len(m.Data)
	if len(m.Header) == 0 {
		return n
	}
	n += len("NATS/1.0\r\n") + len("\r\n")
	for k, vs := range m.Header {
		for _, v := range vs {
			n += len(k) + len(": ") + len(v) + len("\r\n")
		}
	}
	return n
}

// ParseDuration parses the Go duration s given for a task field: timeout,
// unique_ttl or delay (as the broker's JSON, the CLI and the Spool-Timeout
// and Spool-Unique-TTL headers carry them). An empty s is zero. A malformed
// one is a *FieldError of that field, coded as Validate codes the field;
// the message names the header the field travels in.
func ParseDuration(field, s string) (time.Duration, error) {
	if s == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(s)
	if err == nil {
		return d, nil
	}
	const form = "%q is not a Go duration such as 30s or 5m"
	switch field {
	case fieldTimeout:
		err = fmt.Errorf("%w: %w: %s "+form, ErrInvalidTimeout, ErrInvalidHeader, HeaderTimeout, s)
	case fieldUniqueTTL:
		err = fmt.Errorf("%w: %w: %s "+form, ErrInvalidUnique, ErrInvalidHeader, HeaderUniqueTTL, s)
	case fieldDelay:
		err = fmt.Errorf("%w: "+form, ErrInvalidDelay, s)
	default:
		err = fmt.Errorf("%w: "+form, ErrInvalidHeader, s)
	}
	return 0, NewFieldError(field, err)
}

// ParseProcessAt parses the RFC 3339 time a task is delayed to (the
// process_at field). An empty s is the zero time.
func ParseProcessAt(s string) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	at, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, NewFieldError(fieldProcessAt,
			fmt.Errorf("%w: %q is not an RFC 3339 time such as 2026-01-02T15:04:05Z", ErrInvalidDelay, s))
	}
	return at, nil
}
