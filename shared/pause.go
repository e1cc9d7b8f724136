package spool

import (
	"fmt"
	"time"
)

// TypePause is the document stored under a task type in the pause bucket
// (Names.PausedBucket) while the type is paused for the whole fleet. Its
// presence pauses the type: a worker that pulls a task of a paused type
// parks it on Names.ParkedSubject instead of running it. Deleting the key
// resumes the type; the workers then move its parked tasks back. Until,
// when set, ends the pause on its own at that time (the key may stay).
type TypePause struct {
	Type   string     `json:"type"`
	By     string     `json:"by,omitempty"`
	Reason string     `json:"reason,omitempty"`
	At     time.Time  `json:"at"`
	Until  *time.Time `json:"until,omitempty"`
}

// Active reports whether the pause holds at now: it has no end, or its end
// is still to come.
func (p TypePause) Active(now time.Time) bool {
	return p.Until == nil || now.Before(*p.Until)
}

// PausedBucket is the KV bucket of type pauses: spool_paused, key = task
// type, value = TypePause.
func (n Names) PausedBucket() string { return n.prefix + "_paused" }

// PausedFilter matches every change of the pause bucket:
// $KV.spool_paused.>.
func (n Names) PausedFilter() string { return "$KV." + n.PausedBucket() + ".>" }

// ParkedFilter matches every parked task: spool.parked.>. No worker
// consumer's filter matches it.
func (n Names) ParkedFilter() string { return n.prefix + ".parked.>" }

// ParkedSubject returns spool.parked.<priority>.<type>, where a worker
// parks a task of a paused type until the type is resumed.
func (n Names) ParkedSubject(p Priority, typ string) (string, error) {
	if !p.Valid() {
		return "", fmt.Errorf("%w: %d", ErrInvalidPriority, int(p))
	}
	if err := ValidateType(typ); err != nil {
		return "", err
	}
	return n.prefix + ".parked." + p.String() + "." + typ, nil
}

// ParseParkedSubject splits spool.parked.<priority>.<type>.
func (n Names) ParseParkedSubject(subject string) (Priority, string, error) {
	return n.parsePriType(subject, ".parked.")
}

// ParkedTypeFilter matches the parked tasks of one type, every priority:
// spool.parked.*.<type>.
func (n Names) ParkedTypeFilter(typ string) (string, error) {
	if err := ValidateType(typ); err != nil {
		return "", err
	}
	return n.prefix + ".parked.*." + typ, nil
}

// PriorityPauseKey is the key of a priority's pause in the pause bucket
// where workers pull by type: priority=<priority>. The "=" keeps it apart
// from every task type. Its value is a TypePause whose Type is the key.
func PriorityPauseKey(p Priority) string { return "priority=" + p.String() }

// IsTypePauseKey reports whether a key of the pause bucket is a task type's
// pause, not a priority's.
func IsTypePauseKey(key string) bool { return ValidateType(key) == nil }
