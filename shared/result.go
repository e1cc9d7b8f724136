package spool

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"
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
)

// Result is the document stored under the task id in the results bucket.
// Result holds the handler's output: JSON output is kept as JSON, anything
// else is stored as a JSON string.
type Result struct {
	ID          string          `json:"id"`
	Type        string          `json:"type"`
	Priority    Priority        `json:"priority"`
	State       State           `json:"state"`
	Attempts    int             `json:"attempts"`
	Result      json.RawMessage `json:"result,omitempty"`
	Error       string          `json:"error,omitempty"`
	Reason      Reason          `json:"reason,omitempty"`
	NextAttempt *time.Time      `json:"next_attempt_at,omitempty"`
	EnqueuedAt  time.Time       `json:"enqueued_at"`
	StartedAt   *time.Time      `json:"started_at,omitempty"`
	FinishedAt  *time.Time      `json:"finished_at,omitempty"`
	Worker      string          `json:"worker,omitempty"`
	TraceParent string          `json:"traceparent,omitempty"`
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
}

// ResultValue turns handler output into the document's Result field: valid
// JSON is kept as is, anything else becomes a JSON string; empty output is
// omitted.
func ResultValue(out []byte) json.RawMessage {
	if len(out) == 0 {
		return nil
	}
	if json.Valid(out) {
		return json.RawMessage(out)
	}
	s, _ := json.Marshal(string(out)) // a string always marshals
	return s
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
