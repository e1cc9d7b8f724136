package dlqrouter

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	spool "github.com/spoolq/spool/shared"
	"github.com/spoolq/spool/streams"
	"github.com/spoolq/spool/streams/dlq"
)

// sweepUnserved dead-letters, where workers pull by type, the tasks that
// waited longer than the unserved deadline on a task subject no consumer
// delivers: no worker serving their type started in time. Each task goes
// as a dead task does (deadLetter), with reason unserved, so any number of
// routers may sweep at once.
func (r *Router) sweepUnserved(ctx context.Context, b routerBinding) error {
	ctx, cancel := context.WithTimeout(ctx, 4*r.timeout)
	defer cancel()
	info, err := b.tasks.Info(ctx)
	if err != nil {
		return fmt.Errorf("reading stream %s: %w", r.names.TaskStream(), err)
	}
	if streams.ConsumersOf(info.Config) != streams.ConsumersByType {
		return nil
	}
	for k := range streams.PartitionsOf(info.Config) {
		part, err := r.partition(ctx, b, r.names.PartitionStream(k))
		if err != nil {
			return err
		}
		if err := r.sweepPartition(ctx, b, part); err != nil {
			return err
		}
	}
	return nil
}

// sweepPartition sweeps one task stream: each task subject with tasks that
// no type consumer's filter matches, oldest task first, until one is
// younger than the deadline.
func (r *Router) sweepPartition(ctx context.Context, b routerBinding, part jetstream.Stream) error {
	name := part.CachedInfo().Config.Name
	info, err := part.Info(ctx, jetstream.WithSubjectFilter(r.names.Prefix()+".tasks.>"))
	if err != nil {
		return fmt.Errorf("listing the task subjects of %s: %w", name, err)
	}
	patterns, err := streams.TypePatterns(ctx, part, r.names)
	if err != nil {
		return err
	}
	cutoff := time.Now().Add(-r.unservedAfter)
	for subject := range info.State.Subjects {
		p, typ, err := r.names.ParseTaskSubject(subject)
		if err != nil || served(patterns[p], typ) {
			continue
		}
		if err := r.sweepSubject(ctx, b, part, subject, cutoff); err != nil {
			return err
		}
	}
	return nil
}

func served(patterns []string, typ string) bool {
	for _, pattern := range patterns {
		if spool.MatchType(pattern, typ) {
			return true
		}
	}
	return false
}

// sweepSubject dead-letters the tasks of subject stored before cutoff.
func (r *Router) sweepSubject(ctx context.Context, b routerBinding, part jetstream.Stream, subject string, cutoff time.Time) error {
	seq := uint64(1)
	for {
		raw, err := part.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(subject))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("reading the oldest task on %s: %w", subject, err)
		}
		if !raw.Time.Before(cutoff) {
			return nil
		}
		// A task cancelled while it waited ends as cancelled: it goes
		// without a dead letter, as a worker drops it.
		id := r.names.TaskID(raw.Header, part.CachedInfo().Config.Name, raw.Sequence)
		if doc, found, err := b.results.GetFromLeader(ctx, id); err != nil {
			return fmt.Errorf("reading the result of task %s: %w", id, err)
		} else if found && doc.State.Terminal() {
			if err := part.DeleteMsg(ctx, raw.Sequence); err != nil && !errors.Is(err, jetstream.ErrMsgNotFound) {
				return fmt.Errorf("deleting finished task %s: %w", id, err)
			}
			seq = raw.Sequence + 1
			continue
		}
		waited := time.Since(raw.Time).Round(time.Second)
		m := dlq.MessageFromRaw(raw, spool.ReasonUnserved,
			fmt.Sprintf("no worker served the type for %s (the DLQ router's unserved deadline is %s)", waited, r.unservedAfter), 0)
		m.FailedAt = time.Now()
		log := r.logger.With("subject", subject)
		if err := r.deadLetter(ctx, b, part, raw, m, log); err != nil {
			return err
		}
		r.routed.Add(1)
		log.InfoContext(ctx, "task dead-lettered: no worker served its type in time", "waited", waited,
			"dlq_subject", dlq.SubjectFor(r.names, subject))
		seq = raw.Sequence + 1
	}
}
