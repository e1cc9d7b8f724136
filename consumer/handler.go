package consumer

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"

	spool "github.com/spoolq/spool/shared"
)

// Task is one attempt's view of a queued task.
type Task struct {
	// ID is the task id (Spool-Task-Id, else Nats-Msg-Id, else the stream
	// sequence, as p<k>-<seq> on task partition k > 0).
	ID       string
	Type     string
	Priority spool.Priority
	// Payload is the message body, byte for byte.
	Payload []byte
	// Headers are the message headers as published. Do not modify.
	Headers nats.Header
	// Attempt counts from 1.
	Attempt int
	// MaxAttempts is the last attempt that will be made (retries + 1, capped
	// by the consumer's MaxDeliver).
	MaxAttempts int
	// EnqueuedAt is when the task was first enqueued on its priority
	// subject: a task a worker handed back (a full limit, a type pause, a
	// key's turn) keeps the time of its first message (Spool-Enqueued-At).
	EnqueuedAt time.Time

	// watch is the running attempt's, which records its progress; set by
	// the worker.
	watch *watch
	// names and id make ProgressSubject on demand: few handlers ask for
	// it, and building it for every attempt was an allocation each.
	names *spool.Names
	id    string
}

// Progress reports how far the running attempt is: percent from 0 to 100
// (a negative percent: none) and/or value, any JSON of at most
// spool.MaxProgressValue bytes (nil: none). Readers see it at once in the
// result document (state processing, field progress), on the progress
// event, in the broker and the dashboard. It does not wait for the write.
func (t *Task) Progress(percent float64, value json.RawMessage) error {
	p := spool.Progress{Value: value}
	if percent >= 0 {
		p.Percent = &percent
	}
	if err := p.Validate(); err != nil {
		return err
	}
	if t.watch == nil {
		return fmt.Errorf("%w: task %s is not running", ErrSettled, t.ID)
	}
	return t.watch.progress(p)
}

// ProgressSubject is the subject a remote handler publishes progress of
// this task to (a JSON spool.Progress): <prefix>.progress.<task-id>.
func (t *Task) ProgressSubject() string {
	if t.names == nil {
		return ""
	}
	return t.names.ProgressSubject(t.id)
}

// Handler processes tasks of one type. The returned bytes become the result
// (JSON is kept as JSON). A nil error completes the task; an error retries it
// with backoff until its attempts run out; an error wrapped by Permanent goes
// to the dead-letter stream at once. ctx carries the attempt's deadline.
type Handler interface {
	ProcessTask(ctx context.Context, t *Task) ([]byte, error)
}

// HandlerFunc adapts a function to Handler.
type HandlerFunc func(ctx context.Context, t *Task) ([]byte, error)

// ProcessTask calls f.
func (f HandlerFunc) ProcessTask(ctx context.Context, t *Task) ([]byte, error) { return f(ctx, t) }

var _ Handler = HandlerFunc(nil)

// Middleware wraps a Handler.
type Middleware func(Handler) Handler

// PanicError is the error of an attempt whose handler panicked.
type PanicError struct {
	Value any
	Stack []byte
}

func (e *PanicError) Error() string { return fmt.Sprintf("handler panicked: %v", e.Value) }
