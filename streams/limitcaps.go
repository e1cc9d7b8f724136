package streams

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/nats-io/nats.go/jetstream"

	spool "github.com/spoolq/spool/shared"
	"github.com/spoolq/spool/shared/limits"
)

// Where workers pull by type, the server holds a concurrency limit: the
// consumers of one exact type whose flow-control rule sets a concurrency
// limit carry it as MaxAckPending, so the server delivers no more of the
// type's tasks at once per priority than the limit lets run. The leases
// of the flow-control buckets stay the exact fleet-wide guard: a limit is
// per type across the five priorities, and each priority has its own
// consumer. A consumer of a wildcard pattern serves several types with a
// limit each, so it keeps the template's MaxAckPending.

// RuleOf returns the flow-control rule in force for a task type, if any
// (limits.View.Rule, limits.Set.Match).
type RuleOf func(typ string) (limits.Rule, bool)

// ConcurrencyCap is the MaxAckPending the type consumer of pattern is to
// carry on the task stream whose configuration is taskStream: the
// concurrency limit of the pattern's rule when the pattern is one exact
// type and the limit is below the template's MaxAckPending, else the
// template's.
func ConcurrencyCap(taskStream jetstream.StreamConfig, pattern string, rule RuleOf) int {
	base := templateSettings(taskStream).MaxAckPending
	if strings.ContainsAny(pattern, "*>") {
		return base
	}
	r, ok := rule(pattern)
	if !ok || r.Concurrency <= 0 || base > 0 && r.Concurrency >= base {
		return base
	}
	return r.Concurrency
}

// CapConsumer sets the MaxAckPending of the type consumer named name on
// stream to ConcurrencyCap (taskStream, SPOOL_TASKS's configuration)
// when it differs, and returns the value in force. A consumer that is not
// a type consumer is left alone (0). A consumer removed meanwhile is no
// error.
func CapConsumer(ctx context.Context, names spool.Names, stream jetstream.Stream, taskStream jetstream.StreamConfig, name string, rule RuleOf) (int, error) {
	_, pattern, ok := names.ParseTypeConsumer(name)
	if !ok {
		return 0, nil
	}
	c, err := stream.Consumer(ctx, name)
	if errors.Is(err, jetstream.ErrConsumerNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("reading consumer %q: %w", name, err)
	}
	cfg := c.CachedInfo().Config
	want := ConcurrencyCap(taskStream, pattern, rule)
	if cfg.MaxAckPending == want {
		return want, nil
	}
	cfg.MaxAckPending = want
	if _, err := stream.UpdateConsumer(ctx, cfg); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
		return 0, fmt.Errorf("setting MaxAckPending %d on consumer %q: %w", want, name, err)
	}
	return want, nil
}

// CapConsumers sets, where workers pull by type, the MaxAckPending of
// every type consumer of every task partition to ConcurrencyCap for the
// rules (rule). A spool-admin change of a rule calls it, and so does each
// worker for the consumers it pulls; a deployment pulling by priority is
// left alone.
func CapConsumers(ctx context.Context, js jetstream.JetStream, names spool.Names, rule RuleOf) error {
	tasks, err := js.Stream(ctx, names.TaskStream())
	if err != nil {
		return fmt.Errorf("reading stream %q: %w", names.TaskStream(), err)
	}
	cfg := tasks.CachedInfo().Config
	if ConsumersOf(cfg) != ConsumersByType {
		return nil
	}
	for k := range PartitionsOf(cfg) {
		stream := tasks
		if k > 0 {
			if stream, err = js.Stream(ctx, names.PartitionStream(k)); err != nil {
				return fmt.Errorf("reading stream %q: %w", names.PartitionStream(k), err)
			}
		}
		list := stream.ConsumerNames(ctx)
		var consumers []string
		for name := range list.Name() {
			consumers = append(consumers, name)
		}
		if err := list.Err(); err != nil {
			return fmt.Errorf("listing the consumers of stream %q: %w", stream.CachedInfo().Config.Name, err)
		}
		for _, name := range consumers {
			if _, err := CapConsumer(ctx, names, stream, cfg, name, rule); err != nil {
				return err
			}
		}
	}
	return nil
}

// CapConsumersFromStore is CapConsumers with the rules read from the
// deployment's rules bucket.
func CapConsumersFromStore(ctx context.Context, js jetstream.JetStream, names spool.Names, st *limits.Store) error {
	set, err := st.Rules(ctx)
	if err != nil {
		return err
	}
	return CapConsumers(ctx, js, names, set.Match)
}
