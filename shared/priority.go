package spool

import (
	"fmt"
	"strings"
)

// Priority is one of the five task priorities. Lower values are more urgent:
// Critical < High < Normal < Low < Idle.
type Priority int

// The priorities, most urgent first.
const (
	Critical Priority = iota
	High
	Normal
	Low
	Idle
)

// Priorities lists every priority, most urgent first.
var Priorities = [...]Priority{Critical, High, Normal, Low, Idle}

var priorityNames = [...]string{"critical", "high", "normal", "low", "idle"}

// String returns the priority's wire name ("critical", "high", ...).
func (p Priority) String() string {
	if !p.Valid() {
		return fmt.Sprintf("Priority(%d)", int(p))
	}
	return priorityNames[p]
}

// Valid reports whether p is one of the five priorities.
func (p Priority) Valid() bool { return p >= Critical && p <= Idle }

// ParsePriority parses a wire name. It is case-sensitive, as subjects are.
func ParsePriority(s string) (Priority, error) {
	for i, n := range priorityNames {
		if s == n {
			return Priority(i), nil
		}
	}
	return 0, fmt.Errorf("%w: %q is not one of %s", ErrInvalidPriority, s, strings.Join(priorityNames[:], ", "))
}

// MarshalText implements encoding.TextMarshaler.
func (p Priority) MarshalText() ([]byte, error) {
	if !p.Valid() {
		return nil, fmt.Errorf("%w: %d", ErrInvalidPriority, int(p))
	}
	return []byte(p.String()), nil
}

// UnmarshalText implements encoding.TextUnmarshaler.
func (p *Priority) UnmarshalText(b []byte) error {
	v, err := ParsePriority(string(b))
	if err != nil {
		return err
	}
	*p = v
	return nil
}
