package spool

import (
	"fmt"
	"strings"
)

// Consumers per served type: when the task stream pulls by type (see
// streams.ConsumersByType), every priority has one durable consumer per
// type pattern that some worker serves, instead of one shared by every type.
// A worker declares the patterns it serves and pulls only their consumers;
// a task whose type no consumer's filter matches stays queued until a
// worker that serves it starts.

// typeConsumerEscapes spells a type pattern inside a consumer name, which
// may not hold ".", "*" or ">": "." is "~", "*" is "+", ">" is "^". Type
// tokens never hold these characters, so the spelling reads back exactly.
var typeConsumerEscapes = strings.NewReplacer(".", "~", "*", "+", ">", "^")

var typeConsumerUnescapes = strings.NewReplacer("~", ".", "+", "*", "^", ">")

// TypeConsumer is the durable consumer of priority p for the tasks whose
// type matches pattern: spool-high-email~send for "email.send",
// spool-high-email~+ for "email.*". The pattern must pass
// ValidateTypePattern.
func (n Names) TypeConsumer(p Priority, pattern string) string {
	return n.Consumer(p) + "-" + typeConsumerEscapes.Replace(pattern)
}

// ParseTypeConsumer reads the priority and type pattern back from a
// TypeConsumer name; ok is false for any other name.
func (n Names) ParseTypeConsumer(name string) (p Priority, pattern string, ok bool) {
	for _, pr := range Priorities {
		rest, found := strings.CutPrefix(name, n.Consumer(pr)+"-")
		if !found {
			continue
		}
		pattern = typeConsumerUnescapes.Replace(rest)
		if ValidateTypePattern(pattern) != nil {
			return 0, "", false
		}
		return pr, pattern, true
	}
	return 0, "", false
}

// TypeFilter is the subject filter of a TypeConsumer:
// spool.tasks.<priority>.<pattern>.
func (n Names) TypeFilter(p Priority, pattern string) string {
	return n.prefix + ".tasks." + p.String() + "." + pattern
}

// ValidateTypePatterns checks a worker's served patterns: each valid, none
// twice, and no two overlapping (a task type both would match), since the
// consumers of one task stream may not overlap.
func ValidateTypePatterns(patterns []string) error {
	for i, a := range patterns {
		if err := ValidateTypePattern(a); err != nil {
			return err
		}
		for _, b := range patterns[:i] {
			if PatternsOverlap(a, b) {
				return fmt.Errorf("%w: patterns %q and %q both match some task types: serve one of them", ErrInvalidType, b, a)
			}
		}
	}
	return nil
}

// PatternsOverlap reports whether some task type matches both patterns.
func PatternsOverlap(a, b string) bool {
	for {
		at, arest, amore := strings.Cut(a, ".")
		bt, brest, bmore := strings.Cut(b, ".")
		if at == ">" || bt == ">" {
			return true
		}
		if at != "*" && bt != "*" && at != bt {
			return false
		}
		if !amore || !bmore {
			return amore == bmore
		}
		a, b = arest, brest
	}
}

// PatternCovers reports whether every task type matching b matches a.
func PatternCovers(a, b string) bool {
	for {
		at, arest, amore := strings.Cut(a, ".")
		bt, brest, bmore := strings.Cut(b, ".")
		switch {
		case at == ">":
			return true
		case bt == ">":
			return false
		case at != "*" && at != bt:
			return false
		}
		if !amore || !bmore {
			return amore == bmore
		}
		a, b = arest, brest
	}
}
