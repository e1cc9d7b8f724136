package consumer

import (
	"fmt"
	"slices"

	spool "github.com/spoolq/spool/shared"
	"github.com/spoolq/spool/shared/workflow"
)

// WithTypes declares the task types the worker serves: exact types
// ("email.send") or patterns ("email.*", "email.>"). Where workers pull by
// type (streams.ConsumersByType), Start makes or binds one consumer per
// priority and pattern and the worker receives only tasks of these types;
// a type no worker serves stays queued. Where workers pull by priority the
// list changes nothing: every worker takes every type. Default: the
// handler's Types method (a *Mux lists its registered types), else every
// type (">"), which no other worker's types may then overlap. A worker
// pulling by type also serves workflow submissions (workflow.SubmitType),
// which every Go worker runs itself.
func WithTypes(patterns ...string) Option {
	return func(o *config) error {
		if len(patterns) == 0 {
			return fmt.Errorf("%w: WithTypes: no type patterns", ErrInvalidOption)
		}
		for _, p := range patterns {
			if err := spool.ValidateTypePattern(p); err != nil {
				return fmt.Errorf("%w: WithTypes: %w", ErrInvalidOption, err)
			}
		}
		o.Types = slices.Clone(patterns)
		return nil
	}
}

// typeLister is a handler that knows the types it serves, as *Mux does.
type typeLister interface{ Types() []string }

// patternsFor returns the patterns a worker pulling by type serves: the
// declared ones, else the handler's, else every type; and the workflow
// submissions.
func patternsFor(o *config, h Handler) ([]string, error) {
	patterns := o.Types
	if patterns == nil {
		patterns = []string{">"}
		if l, ok := h.(typeLister); ok && len(l.Types()) > 0 {
			patterns = l.Types()
		}
	}
	// Every Go worker runs workflow submissions itself (steps.handler),
	// so it serves their reserved type too; a declared pattern that
	// covers it (">") absorbs it.
	patterns = append(slices.Clone(patterns), workflow.SubmitType)
	served, err := servedPatterns(patterns)
	if err != nil {
		return nil, fmt.Errorf("%w: the served types: %w", ErrInvalidOption, err)
	}
	return served, nil
}

// servedPatterns validates patterns and drops each one another covers
// ("email.send" beside "email.*"): a task is pulled through the widest
// pattern that matches it. Two patterns that only partly overlap
// ("a.*" and "*.b") are refused, since consumers of one task stream may
// not overlap.
func servedPatterns(patterns []string) ([]string, error) {
	if len(patterns) == 0 {
		return nil, fmt.Errorf("%w: no type patterns", spool.ErrInvalidType)
	}
	for _, p := range patterns {
		if err := spool.ValidateTypePattern(p); err != nil {
			return nil, err
		}
	}
	var out []string
	for i, p := range patterns {
		covered := slices.ContainsFunc(patterns, func(q string) bool { return q != p && spool.PatternCovers(q, p) }) ||
			slices.Index(patterns, p) < i
		if !covered {
			out = append(out, p)
		}
	}
	slices.Sort(out)
	if err := spool.ValidateTypePatterns(out); err != nil {
		return nil, err
	}
	return out, nil
}
