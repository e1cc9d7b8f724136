package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"

	spool "github.com/spoolq/spool/shared"
	"github.com/spoolq/spool/shared/fleet"
	"github.com/spoolq/spool/shared/workflow"
	"github.com/spoolq/spool/streams"
)

// Serving is which task types the workers serve: what a producer checks
// a task's type against before it warns that no worker will run the task
// (Unserved).
type Serving struct {
	// Consumers is how workers pull (streams.ConsumersByPriority or
	// streams.ConsumersByType).
	Consumers string `json:"consumers"`
	// Patterns are the served task types and type patterns, sorted. Where
	// workers pull by type, they are the patterns of the type consumers on
	// the task streams, of any priority: a worker made each one to serve
	// it. Where workers pull by priority, they are what the running
	// consumer processes list in their service metadata
	// (fleet.MetadataHandlers).
	Patterns []string `json:"patterns,omitempty"`
	// Workers counts the consumer processes that answered, where workers
	// pull by priority.
	Workers int `json:"workers"`
	// Any is set when a process answered without listing its types (a
	// version before the list, or a library worker whose service names
	// none): it may serve every type.
	Any bool `json:"any,omitempty"`
}

// maxPatternsNamed caps the served patterns a warning names.
const maxPatternsNamed = 10

// Serves reports whether a worker serves typ, or may.
func (s Serving) Serves(typ string) bool {
	return s.Any || slices.ContainsFunc(s.Patterns, func(p string) bool { return spool.MatchType(p, typ) })
}

// Unserved says in one sentence why no worker will run tasks of typ and
// what becomes of them; "" when a worker serves the type or may.
func (s Serving) Unserved(typ string) string {
	switch {
	case s.Serves(typ):
		return ""
	case s.Consumers == streams.ConsumersByType && len(s.Patterns) == 0:
		return fmt.Sprintf("no worker serves any task type yet: tasks of type %q wait in the queue until a worker serving it starts", typ)
	case s.Consumers == streams.ConsumersByType:
		return fmt.Sprintf("no worker serves type %q (workers serve %s): its tasks wait in the queue until a worker serving it starts",
			typ, named(s.Patterns))
	case s.Workers == 0:
		return fmt.Sprintf("no worker is running (no %s process answered): tasks of type %q wait in the queue until one starts",
			fleet.ServiceName, typ)
	}
	return fmt.Sprintf("no worker serves type %q (the %d running serve %s): its tasks will be dead-lettered with reason %s",
		typ, s.Workers, named(s.Patterns), spool.ReasonNoHandler)
}

// named lists patterns for a sentence, the first maxPatternsNamed of them,
// leaving out the workflow submissions every Go worker serves.
func named(patterns []string) string {
	patterns = slices.DeleteFunc(slices.Clone(patterns), func(p string) bool { return p == workflow.SubmitType })
	switch {
	case len(patterns) == 0:
		return "no type"
	case len(patterns) > maxPatternsNamed:
		return fmt.Sprintf("%s and %d more", strings.Join(patterns[:maxPatternsNamed], ", "), len(patterns)-maxPatternsNamed)
	}
	return strings.Join(patterns, ", ")
}

// Serving reads which task types the workers serve. Where workers pull by
// type it lists the consumer names of every task stream; where they pull
// by priority it pings the consumer processes ($SRV.PING.spool-consumer)
// and reads their service metadata, collecting answers until a fifth of
// the fleet wait passes without one (no responders ends it at once). A
// fleet that neither answers nor is reported absent within the fleet wait
// is an error: the types served are unknown.
func (c *Client) Serving(ctx context.Context) (Serving, error) {
	return call(ctx, c, "reading which task types the workers serve", c.serving)
}

func (c *Client) serving(ctx context.Context) (Serving, error) {
	name := c.names.TaskStream()
	tasks, err := c.js.Stream(ctx, name)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return Serving{}, &spool.NotProvisionedError{Kind: "stream", Name: name, Err: err}
	}
	if err != nil {
		return Serving{}, fmt.Errorf("reading stream %q: %w", name, err)
	}
	cfg := tasks.CachedInfo().Config
	sv := Serving{Consumers: streams.ConsumersOf(cfg)}
	if sv.Consumers == streams.ConsumersByType {
		sv.Patterns, err = c.typePatterns(ctx, tasks, streams.PartitionsOf(cfg))
		return sv, err
	}
	var patterns []string
	none, err := c.ask(ctx, micro.PingVerb, c.fleetWait/5, func(data []byte) {
		var ping micro.Ping
		if err := json.Unmarshal(data, &ping); err != nil {
			c.logger.DebugContext(ctx, "leaving out a fleet answer that is not a service ping", "error", err)
			return
		}
		sv.Workers++
		handlers, ok := ping.Metadata[fleet.MetadataHandlers]
		if !ok {
			sv.Any = true
			return
		}
		for p := range strings.SplitSeq(handlers, ",") {
			if p != "" {
				patterns = append(patterns, p)
			}
		}
	})
	if err != nil {
		return sv, err
	}
	if sv.Workers == 0 && !none {
		return sv, fmt.Errorf("asking the fleet: no %s process answered within %s, and the server did not report none listening", fleet.ServiceName, c.fleetWait)
	}
	slices.Sort(patterns)
	sv.Patterns = slices.Compact(patterns)
	return sv, nil
}

// typePatterns lists the patterns of the type consumers of every priority
// on the parts task streams, sorted and each once.
func (c *Client) typePatterns(ctx context.Context, tasks jetstream.Stream, parts int) ([]string, error) {
	var all []string
	for k := range parts {
		part := tasks
		if k > 0 {
			name := c.names.PartitionStream(k)
			var err error
			if part, err = c.js.Stream(ctx, name); err != nil {
				return nil, fmt.Errorf("reading stream %q: %w", name, err)
			}
		}
		byPriority, err := streams.TypePatterns(ctx, part, c.names)
		if err != nil {
			return nil, err
		}
		for _, patterns := range byPriority {
			all = append(all, patterns...)
		}
	}
	slices.Sort(all)
	return slices.Compact(all), nil
}
