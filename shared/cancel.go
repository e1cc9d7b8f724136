package spool

import "time"

// Cancellation is the document stored under a task id in the cancel bucket
// (Names.CancelBucket) when the task is cancelled. Its presence is the
// tombstone a worker checks before running the task, and its put, seen on
// Names.CancelSubject, tells the process running the task to cancel it.
type Cancellation struct {
	ID     string    `json:"id"`
	By     string    `json:"by,omitempty"`
	Reason string    `json:"reason,omitempty"`
	At     time.Time `json:"at"`
}

// TermCancelled is the reason a worker gives when it terminates a
// cancelled task (+TERM cancelled), so the server's termination advisory
// tells it apart from a dead letter.
const TermCancelled = "cancelled"
