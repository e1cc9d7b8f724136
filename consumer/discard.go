package consumer

import (
	"fmt"
	"slices"

	"github.com/nats-io/nats.go"

	spool "github.com/spoolq/spool/shared"
	"github.com/spoolq/spool/shared/workflow"
)

// WithDiscardResults discards the results of the task types that match
// patterns: exact types ("email.send") or patterns ("email.*", "email.>").
// A completed task of such a type stores no result document, only a
// marker that it completed, so Client.Result, Client.Wait, the broker and
// the dashboard answer that its result was discarded. Its events, its
// counters, its failed attempts (retrying, snoozed, dead, with the dead
// letter) and its cancellation are kept as for any task. A task's own
// Spool-Result header wins: "keep" keeps the result of a task of such a
// type, "discard" discards that of any other. Workflow steps and
// submissions always keep theirs: the workflow reads them. Calling it
// again adds patterns. Default: none, every result is kept.
func WithDiscardResults(patterns ...string) Option {
	return func(o *config) error {
		for _, p := range patterns {
			if err := spool.ValidateTypePattern(p); err != nil {
				return fmt.Errorf("%w: WithDiscardResults: %w", ErrInvalidOption, err)
			}
		}
		o.DiscardResults = append(slices.Clone(o.DiscardResults), patterns...)
		return nil
	}
}

// discardsResult reports whether the completed result of a task of type
// typ with result policy policy and headers h is discarded: its policy
// says so, or, without one, a WithDiscardResults pattern matches the type.
// A workflow step or submission keeps its result whatever it says.
func (o *config) discardsResult(policy spool.ResultPolicy, typ string, h nats.Header) bool {
	if typ == workflow.SubmitType || h.Get(workflow.HeaderWorkflow) != "" {
		return false
	}
	switch policy {
	case spool.DiscardResult:
		return true
	case spool.KeepResult:
		return false
	}
	for _, p := range o.DiscardResults {
		if spool.MatchType(p, typ) {
			return true
		}
	}
	return false
}
