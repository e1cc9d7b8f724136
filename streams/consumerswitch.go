package streams

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/nats-io/nats.go/jetstream"
)

// resolveConsumers fills an empty Settings.Consumers with what SPOOL_TASKS
// records, so a provision that does not name the mode keeps it. A new
// deployment pulls by type. A stream that records no mode pulls by
// priority: it was provisioned before the mode was a setting.
func resolveConsumers(ctx context.Context, js jetstream.JetStream, t Topology) (Topology, error) {
	if t.Settings.Consumers != "" {
		return t, nil
	}
	t.Settings.Consumers = ConsumersByType
	s, err := js.Stream(ctx, t.Names.TaskStream())
	switch {
	case errors.Is(err, jetstream.ErrStreamNotFound):
		return t, nil
	case err != nil:
		return t, fmt.Errorf("looking up stream %q: %w", t.Names.TaskStream(), err)
	}
	t.Settings.Consumers = ConsumersOf(s.CachedInfo().Config)
	return t, nil
}

// checkConsumerSwitch refuses to move back from ConsumersByType to
// ConsumersByPriority while type consumers exist: a priority's consumer
// would overlap them, and Spool does not delete consumers that workers
// made. (Moving to ConsumersByType removes the priority consumers: see
// removeConsumer.)
func checkConsumerSwitch(ctx context.Context, js jetstream.JetStream, t Topology) error {
	if t.Settings.Consumers != ConsumersByPriority {
		return nil
	}
	for k := range t.Settings.Partitions {
		stream := t.Names.PartitionStream(k)
		s, err := js.Stream(ctx, stream)
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			continue
		}
		if err != nil {
			return fmt.Errorf("looking up stream %q: %w", stream, err)
		}
		names := s.ConsumerNames(ctx)
		for name := range names.Name() {
			if _, pattern, ok := t.Names.ParseTypeConsumer(name); ok {
				return fmt.Errorf("%w: stream %q has consumer %q for the type pattern %q: workers pull by type here; set SPOOL_CONSUMERS=%s, or stop those workers and remove the type consumers (nats consumer rm %s %s) before pulling by priority",
					ErrConflict, stream, name, pattern, ConsumersByType, stream, name)
			}
		}
		if err := names.Err(); err != nil {
			return fmt.Errorf("listing the consumers of stream %q: %w", stream, err)
		}
	}
	return nil
}

// removeConsumer deletes a priority consumer when workers pull by type.
// Its queued tasks stay in the stream (a consumer does not own messages)
// for the type consumers to deliver. A task it had delivered and not yet
// acknowledged is delivered again by a type consumer, at once: the workers
// that pull by priority are to be stopped before the switch, and a task in
// retry backoff then runs early.
func removeConsumer(ctx context.Context, js jetstream.JetStream, stream, name string, logger *slog.Logger) error {
	if c, err := js.Consumer(ctx, stream, name); err == nil {
		if info, err := c.Info(ctx); err == nil && info.NumAckPending > 0 {
			logger.WarnContext(ctx, "removing a priority consumer with tasks delivered and not acknowledged: a type consumer delivers them again",
				"stream", stream, "consumer", name, "tasks", info.NumAckPending)
		}
	}
	err := js.DeleteConsumer(ctx, stream, name)
	if errors.Is(err, jetstream.ErrConsumerNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("removing consumer %q from stream %q: %w", name, stream, err)
	}
	logger.InfoContext(ctx, "consumer removed: workers pull by type", "stream", stream, "consumer", name)
	return nil
}
