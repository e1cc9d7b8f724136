package main

import (
	"context"
	"fmt"
	"log/slog"

	spool "github.com/spoolq/spool/shared"
	"github.com/spoolq/spool/shared/workflow"
	"github.com/spoolq/spool/streams"
)

// pullByType provisions the topology again so that workers pull by type
// (streams.ConsumersByType), and returns what puts back the way they
// pulled before: the type consumers the workers made are removed first,
// since a priority consumer may not overlap them.
func (b *bench) pullByType(ctx context.Context) (restore func(context.Context) error, err error) {
	tasks, err := b.js.Stream(ctx, b.names.TaskStream())
	if err != nil {
		return nil, fmt.Errorf("reading the task stream: %w", err)
	}
	before := streams.ConsumersOf(tasks.CachedInfo().Config)
	provision := func(ctx context.Context, mode string) error {
		s := b.topo.Settings
		s.Consumers = mode
		topo, err := streams.New(b.names, s)
		if err != nil {
			return err
		}
		if err := streams.Provision(ctx, b.js, topo, slog.New(slog.DiscardHandler)); err != nil {
			return fmt.Errorf("provisioning workers pulling by %s: %w", mode, err)
		}
		return nil
	}
	if before == streams.ConsumersByType {
		return func(context.Context) error { return nil }, nil
	}
	if err := provision(ctx, streams.ConsumersByType); err != nil {
		return nil, err
	}
	if err := b.makeTypeConsumers(ctx, "bench", limitedType, workflow.SubmitType); err != nil {
		return nil, err
	}
	return func(ctx context.Context) error {
		list := tasks.ConsumerNames(ctx)
		var made []string
		for name := range list.Name() {
			if _, _, ok := b.names.ParseTypeConsumer(name); ok {
				made = append(made, name)
			}
		}
		if err := list.Err(); err != nil {
			return fmt.Errorf("listing the type consumers: %w", err)
		}
		for _, name := range made {
			if err := tasks.DeleteConsumer(ctx, name); err != nil {
				return fmt.Errorf("removing type consumer %s: %w", name, err)
			}
		}
		return provision(ctx, before)
	}, nil
}

// makeTypeConsumers makes the consumers a worker serving patterns makes
// at its start, on every priority, so that the first measured run does
// not count their making.
func (b *bench) makeTypeConsumers(ctx context.Context, patterns ...string) error {
	tasks, err := b.js.Stream(ctx, b.names.TaskStream())
	if err != nil {
		return fmt.Errorf("reading the task stream: %w", err)
	}
	for _, pattern := range patterns {
		for _, p := range spool.Priorities {
			cfg := streams.TypeConsumerConfig(b.names, tasks.CachedInfo().Config, p, pattern)
			if _, err := tasks.CreateOrUpdateConsumer(ctx, cfg); err != nil {
				return fmt.Errorf("making consumer %s: %w", cfg.Durable, err)
			}
		}
	}
	return nil
}
