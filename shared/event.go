package spool

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"
)

// EventKind names a task's state change in the event stream.
type EventKind string

// Event kinds, published on Names.EventSubject.
const (
	EventEnqueued  EventKind = "enqueued"  // stored in the task stream (or its schedule stored), by the Go producer and the broker
	EventStarted   EventKind = "started"   // an attempt started
	EventProgress  EventKind = "progress"  // the handler reported progress
	EventRetrying  EventKind = "retrying"  // an attempt failed and another will follow
	EventSnoozed   EventKind = "snoozed"   // the handler snoozed the task: it runs again later, no attempt counted
	EventCompleted EventKind = "completed" // the handler succeeded and the result is stored
	EventDead      EventKind = "dead"      // the task went to the dead-letter stream
	EventCancelled EventKind = "cancelled" // the task was cancelled (once, by whoever stored its cancelled document)
)

// EventKinds lists every kind, in a task's usual order.
var EventKinds = []EventKind{EventEnqueued, EventStarted, EventProgress, EventRetrying, EventSnoozed, EventCompleted, EventDead, EventCancelled}

// Terminal reports whether no further event of the task follows (except a
// replay from the dead-letter stream, which enqueues it again).
func (k EventKind) Terminal() bool {
	return k == EventCompleted || k == EventDead || k == EventCancelled
}

// Event is the body of a message on the event subjects: what happened, when,
// and the task's result document as it stood (for enqueued, the fields
// known at enqueue time).
type Event struct {
	Event EventKind `json:"event"`
	At    time.Time `json:"at"`
	Task  Result    `json:"task"`
}

// AppendEvent appends the JSON event of kind at at, wrapping doc, an encoded
// result document, without decoding it.
func AppendEvent(b []byte, kind EventKind, at time.Time, doc []byte) []byte {
	b = appendEventHead(b, kind, at)
	b = append(b, doc...)
	return append(b, '}')
}

// appendEventHead appends an event up to its task document.
func appendEventHead(b []byte, kind EventKind, at time.Time) []byte {
	b = append(b, `{"event":"`...)
	b = append(b, kind...)
	b = append(b, `","at":"`...)
	b = AppendTime(b, at.UTC())
	return append(b, `","task":`...)
}

// EncodeEvent encodes an event of kind about doc at at.
func EncodeEvent(kind EventKind, at time.Time, doc Result) ([]byte, error) {
	// One buffer: the document is encoded in place after the event's head.
	if b, ok := AppendResult(appendEventHead(make([]byte, 0, 464), kind, at), &doc); ok {
		return append(b, '}'), nil
	}
	d, err := json.Marshal(doc)
	if err != nil {
		return nil, fmt.Errorf("encoding the %s event of task %s: %w", kind, doc.ID, err)
	}
	return AppendEvent(make([]byte, 0, len(d)+80), kind, at, d), nil
}

// EventSubject is the subject of an event:
// <prefix>.events.<kind>.<priority>.<task-id>.<type>, so subscribers
// filter by kind, priority, task or type with wildcards (EventFilter).
func (n Names) EventSubject(kind EventKind, p Priority, id, typ string) string {
	if typ == "" {
		typ = "unknown"
	}
	return n.prefix + ".events." + string(kind) + "." + p.String() + "." + id + "." + typ
}

// EventFilter selects events; an empty field matches any value.
type EventFilter struct {
	Kind     EventKind
	Priority *Priority
	ID       string
	Type     string
}

// EventFilterSubject is the subscription subject of f.
func (n Names) EventFilterSubject(f EventFilter) (string, error) {
	tok := func(s string) string {
		if s == "" {
			return "*"
		}
		return s
	}
	if f.Kind != "" && (strings.ContainsAny(string(f.Kind), ".*> ") || f.Kind == "") {
		return "", fmt.Errorf("event kind %q: want one of %v", f.Kind, EventKinds)
	}
	if f.ID != "" {
		if err := ValidateID(f.ID); err != nil {
			return "", err
		}
	}
	prio := "*"
	if f.Priority != nil {
		if !f.Priority.Valid() {
			return "", fmt.Errorf("%w: %d", ErrInvalidPriority, int(*f.Priority))
		}
		prio = f.Priority.String()
	}
	typ := ">"
	if f.Type != "" {
		if err := ValidateType(f.Type); err != nil {
			return "", err
		}
		typ = f.Type
	}
	return n.prefix + ".events." + tok(string(f.Kind)) + "." + prio + "." + tok(f.ID) + "." + typ, nil
}
