package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	spool "github.com/spoolq/spool/shared"
	"github.com/spoolq/spool/streams"
)

// recreate deletes and provisions the task stream again: an empty stream
// with an empty duplicate-tracking table (a purge keeps the table).
func (b *bench) recreate(ctx context.Context) error {
	if err := b.js.DeleteStream(ctx, b.names.TaskStream()); err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
		return fmt.Errorf("deleting the task stream: %w", err)
	}
	return streams.Provision(ctx, b.js, b.topo, slog.New(slog.DiscardHandler))
}

// purge empties the task stream and the results bucket.
func (b *bench) purge(ctx context.Context) error {
	for _, name := range []string{b.names.TaskStream(), "KV_" + b.names.ResultsBucket()} {
		s, err := b.js.Stream(ctx, name)
		if err != nil {
			return fmt.Errorf("binding %s: %w", name, err)
		}
		if err := s.Purge(ctx); err != nil {
			return fmt.Errorf("purging %s: %w", name, err)
		}
	}
	return nil
}

// fill publishes n normal tasks of type bench (no headers: the fastest
// raw publish) and waits for every ack.
func (b *bench) fill(ctx context.Context, p spool.Priority, n int) error {
	subject, err := b.names.TaskSubject(p, "bench")
	if err != nil {
		return err
	}
	payload := []byte(`{"n":1}`)
	for range n {
		if _, err := b.js.PublishAsync(subject, payload, jetstream.WithStallWait(time.Minute)); err != nil {
			return fmt.Errorf("filling: %w", err)
		}
	}
	return b.filled(ctx)
}

// filled waits for the acks of every asynchronous publish of a fill.
func (b *bench) filled(ctx context.Context) error {
	select {
	case <-b.js.PublishAsyncComplete():
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(10 * time.Minute):
		return errors.New("filling: acks did not arrive")
	}
	return nil
}

// topUp fills the normal priority up to n tasks waiting for delivery. It
// reads the consumer's NumPending, not the stream's message count: acks
// are applied asynchronously (slowly under SyncAlways), so the stream may
// still count tasks that were processed.
func (b *bench) topUp(ctx context.Context, n int) error {
	c, err := b.js.Consumer(ctx, b.names.TaskStream(), b.names.Consumer(spool.Normal))
	if err != nil {
		return fmt.Errorf("binding the normal consumer: %w", err)
	}
	info, err := c.Info(ctx)
	if err != nil {
		return fmt.Errorf("reading the normal consumer: %w", err)
	}
	if have := int(info.NumPending); have < n {
		return b.fill(ctx, spool.Normal, n-have)
	}
	return nil
}

// benchSettings names how the bench's workers pull: by priority, as the
// deployments the recorded figures compare with, and because the raw
// baselines and the backlog reads use the priority consumers.
func benchSettings(s streams.Settings) streams.Settings {
	s.Consumers = streams.ConsumersByPriority
	return s
}
