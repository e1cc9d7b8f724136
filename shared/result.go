package spool

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"time"
	"unicode/utf8"
)

// State is a task's lifecycle state in its result document.
type State string

// Task states. Completed, Dead and Cancelled are terminal.
const (
	StatePending    State = "pending"
	StateScheduled  State = "scheduled"
	StateProcessing State = "processing"
	StateRetrying   State = "retrying"
	StateCompleted  State = "completed"
	StateDead       State = "dead"
	StateCancelled  State = "cancelled"
	// StateSnoozed: the handler snoozed the task; it runs again at
	// next_attempt_at without counting an attempt.
	StateSnoozed State = "snoozed"
)

// Terminal reports whether no further attempt will follow.
func (s State) Terminal() bool {
	return s == StateCompleted || s == StateDead || s == StateCancelled
}

// Reason says why a task was dead-lettered (header Spool-Reason).
type Reason string

// Dead-letter reasons.
const (
	ReasonError      Reason = "error"       // the last allowed attempt failed
	ReasonPermanent  Reason = "permanent"   // the handler returned a permanent error
	ReasonTimeout    Reason = "timeout"     // the last allowed attempt ran past its deadline
	ReasonPanic      Reason = "panic"       // the last allowed attempt panicked
	ReasonMaxDeliver Reason = "max_deliver" // deliveries ran out without a verdict (worker crashes)
	ReasonBadInput   Reason = "bad_input"   // headers or id could not be decoded
	ReasonNoHandler  Reason = "no_handler"  // no handler is registered for the type
	ReasonUnserved   Reason = "unserved"    // no worker served the type within the DLQ router's deadline
)

// Result encodings: the result_encoding of a document whose result is not
// the output itself. ResultEncodingText: result is a JSON string whose
// UTF-8 bytes are the output (text that is not JSON). ResultEncodingBase64:
// result is a JSON string holding the output in standard base64 with
// padding (output that is not UTF-8).
const (
	ResultEncodingText   = "text"
	ResultEncodingBase64 = "base64"
)

// Result is the document stored under the task id in the results bucket.
// Result holds the handler's output: output that is valid UTF-8 JSON with
// no surrounding whitespace is stored as that JSON, byte for byte; other
// UTF-8 output as a JSON string with ResultEncoding "text"; anything else
// as a base64 JSON string with ResultEncoding "base64". Output returns the
// handler's bytes in every case.
type Result struct {
	ID       string          `json:"id"`
	Type     string          `json:"type"`
	Priority Priority        `json:"priority"`
	State    State           `json:"state"`
	Attempts int             `json:"attempts"`
	Result   json.RawMessage `json:"result,omitempty"`
	// ResultEncoding is empty when Result is the output itself (JSON),
	// ResultEncodingText when Result is a JSON string of the output, and
	// ResultEncodingBase64 when it is a JSON string of the output in
	// standard base64.
	ResultEncoding string     `json:"result_encoding,omitempty"`
	Error          string     `json:"error,omitempty"`
	Reason         Reason     `json:"reason,omitempty"`
	NextAttempt    *time.Time `json:"next_attempt_at,omitempty"`
	EnqueuedAt     time.Time  `json:"enqueued_at"`
	// HandedBackAt is set when the message that ran the task is a copy a
	// worker published again (flow control, a type pause, a waiting room,
	// a key's turn): when that copy entered its queue. EnqueuedAt stays
	// the task's first enqueue.
	HandedBackAt *time.Time `json:"handed_back_at,omitempty"`
	StartedAt    *time.Time `json:"started_at,omitempty"`
	FinishedAt   *time.Time `json:"finished_at,omitempty"`
	Worker       string     `json:"worker,omitempty"`
	TraceParent  string     `json:"traceparent,omitempty"`
	// Replays counts how often the task was replayed from the dead-letter
	// stream; ReplayedAt is when it last was. Both are absent for a task
	// never dead-lettered and replayed.
	Replays    int        `json:"replays,omitempty"`
	ReplayedAt *time.Time `json:"replayed_at,omitempty"`
	// CancelledBy and CancelReason say who cancelled the task and why
	// (state cancelled only).
	CancelledBy  string `json:"cancelled_by,omitempty"`
	CancelReason string `json:"cancel_reason,omitempty"`
	// Progress is what the running handler last reported (processing).
	Progress *Progress `json:"progress,omitempty"`
	// Snoozes counts the times the handler snoozed the task; those
	// deliveries are not attempts.
	Snoozes int `json:"snoozes,omitempty"`
	// ResultDiscarded is set in the completed event of a task whose
	// result is discarded (Spool-Result: discard, or the worker's rule for
	// its type): the event carries no output, and no document is stored.
	ResultDiscarded bool `json:"result_discarded,omitempty"`
}

// Output returns the handler's output, byte for byte: Result's string for
// ResultEncodingText, decoded from base64 for ResultEncodingBase64, else
// Result itself (JSON output, and documents written before result_encoding
// existed, whose non-JSON output was stored as a JSON string). Empty output
// gives nil.
func (r Result) Output() ([]byte, error) {
	switch r.ResultEncoding {
	case "":
		return r.Result, nil
	case ResultEncodingText:
		var s string
		if err := json.Unmarshal(r.Result, &s); err != nil {
			return nil, fmt.Errorf("decoding the text result of task %s: result is not a JSON string: %w", r.ID, err)
		}
		return []byte(s), nil
	case ResultEncodingBase64:
		var s string
		if err := json.Unmarshal(r.Result, &s); err != nil {
			return nil, fmt.Errorf("decoding the base64 result of task %s: result is not a JSON string: %w", r.ID, err)
		}
		out, err := base64.StdEncoding.DecodeString(s)
		if err != nil {
			return nil, fmt.Errorf("decoding the base64 result of task %s: %w", r.ID, err)
		}
		return out, nil
	default:
		return nil, fmt.Errorf("decoding the result of task %s: unknown result_encoding %q (this reader knows none, %q and %q)",
			r.ID, r.ResultEncoding, ResultEncodingText, ResultEncodingBase64)
	}
}

// ResultIsJSON reports whether output is stored in a result document as
// itself: valid JSON, valid UTF-8, and no whitespace before or after the
// value (a JSON reader would not give it back). Other output is stored as
// text or in base64 (ResultValue).
func ResultIsJSON(out []byte) bool {
	if len(out) == 0 || isJSONSpace(out[0]) || isJSONSpace(out[len(out)-1]) {
		return false
	}
	return json.Valid(out) && utf8.Valid(out)
}

func isJSONSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

// ResultValue turns handler output into the document's Result and
// ResultEncoding fields: JSON as itself (ResultIsJSON), other UTF-8 as a
// JSON string (ResultEncodingText), anything else in base64
// (ResultEncodingBase64); empty output gives nil and "".
func ResultValue(out []byte) (json.RawMessage, string) {
	if len(out) == 0 {
		return nil, ""
	}
	if ResultIsJSON(out) {
		return json.RawMessage(out), ""
	}
	if utf8.Valid(out) {
		s, _ := json.Marshal(string(out)) // a valid UTF-8 string always marshals, and unmarshals to the same bytes
		return s, ResultEncodingText
	}
	b := make([]byte, 0, base64.StdEncoding.EncodedLen(len(out))+2)
	b = append(b, '"')
	b = base64.StdEncoding.AppendEncode(b, out)
	return append(b, '"'), ResultEncodingBase64
}

// MaxProgressValue is the largest progress value a handler may report, in
// bytes of JSON.
const MaxProgressValue = 4 << 10

// Progress is what a running handler last reported (Result.Progress): a
// percentage, a small JSON value, or both.
type Progress struct {
	// Percent is 0 to 100; nil when the handler gave none.
	Percent *float64 `json:"percent,omitempty"`
	// Value is any JSON the handler chose, at most MaxProgressValue bytes.
	Value json.RawMessage `json:"value,omitempty"`
	// At is when the worker recorded it.
	At time.Time `json:"at"`
}

// Validate checks the percentage and the value.
func (p Progress) Validate() error {
	if p.Percent == nil && len(p.Value) == 0 {
		return errors.New("progress: give a percent, a value or both")
	}
	if p.Percent != nil && (*p.Percent < 0 || *p.Percent > 100 || *p.Percent != *p.Percent) {
		return fmt.Errorf("progress: percent %v is outside 0 to 100", *p.Percent)
	}
	if len(p.Value) > MaxProgressValue {
		return fmt.Errorf("progress: value of %d bytes exceeds %d", len(p.Value), MaxProgressValue)
	}
	if len(p.Value) > 0 && !json.Valid(p.Value) {
		return errors.New("progress: value is not valid JSON")
	}
	return nil
}
