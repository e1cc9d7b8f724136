package admin

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	spool "github.com/spoolq/spool/shared"
	"github.com/spoolq/spool/shared/limits"
	"github.com/spoolq/spool/streams"
)

// PriorityStatus describes one priority's queue.
type PriorityStatus struct {
	Priority spool.Priority `json:"priority"`
	// Pending counts tasks not yet delivered to any worker.
	Pending uint64 `json:"pending"`
	// InFlight counts tasks delivered and not yet acked: running, or
	// waiting in retry backoff.
	InFlight int `json:"in_flight"`
	// Redelivered counts in-flight tasks delivered more than once.
	Redelivered int `json:"redelivered"`
	// OldestWait is the age of the oldest task not yet delivered; zero when
	// none waits.
	OldestWait time.Duration `json:"oldest_wait_ns"`
	// Paused is set while the priority is paused (PausePriority);
	// PausedUntil is when the pause ends (Forever: when resumed).
	Paused      bool       `json:"paused,omitempty"`
	PausedUntil *time.Time `json:"paused_until,omitempty"`
}

// Status is a snapshot of the whole queue.
type Status struct {
	// Priorities has one entry per priority, most urgent first.
	Priorities []PriorityStatus `json:"priorities"`
	// Scheduled counts delayed tasks whose time has not come, and tasks
	// handed back by a full rate limit until their schedule fires.
	Scheduled uint64 `json:"scheduled"`
	// Parked counts the tasks parked while their type is paused (per type
	// in Types).
	Parked uint64 `json:"parked"`
	// Held counts the tasks waiting for their ordered or fair key's turn.
	Held uint64 `json:"held"`
	// WaitingRoom counts the tasks waiting for a slot of a full
	// concurrency limit.
	WaitingRoom uint64 `json:"waiting_room"`
	// DeadLetters is the number of messages in the DLQ stream.
	DeadLetters uint64 `json:"dead_letters"`
	// Results is the number of result documents kept.
	Results uint64 `json:"results"`
	// StoreBytes is the task stream's size on the server.
	StoreBytes uint64 `json:"store_bytes"`
	// Consumers is how workers pull (streams.ConsumersByPriority or
	// streams.ConsumersByType).
	Consumers string `json:"consumers"`
	// Unserved lists, where workers pull by type, the task types queued
	// that no worker has served yet, most queued first (at most 100).
	Unserved []UnservedType `json:"unserved,omitempty"`
	// Types lists the task types that are paused or have parked tasks
	// (see Client.Types); empty when none.
	Types []TypeStatus `json:"types,omitempty"`
	// Limits is every flow-control rule with its use across the fleet
	// (slots held, busiest keys, rate state); empty when no rule is set
	// or the deployment has no flow-control buckets. Tasks handed back by
	// a limit wait as schedules, counted in Scheduled.
	Limits []limits.Usage `json:"limits,omitempty"`
	// LimitsError says why the flow-control usage could not be read; the
	// queue's figures are still good.
	LimitsError string `json:"limits_error,omitempty"`
}

// Status reads the queue's status: a few JetStream requests per priority,
// whatever the backlog, and a listing of the slots held per flow-control
// rule.
func (c *Client) Status(ctx context.Context) (Status, error) {
	return call(ctx, c, "reading the queue's status", c.status)
}

func (c *Client) status(ctx context.Context) (Status, error) {
	var st Status
	names := c.names
	tasks, err := c.js.Stream(ctx, names.TaskStream())
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return st, &spool.NotProvisionedError{Kind: "stream", Name: names.TaskStream(), Err: err}
	}
	if err != nil {
		return st, fmt.Errorf("reading stream %q: %w", names.TaskStream(), err)
	}
	// Every partition's consumers add up (one partition: SPOOL_TASKS only).
	parts := []jetstream.Stream{tasks}
	for k := 1; k < streams.PartitionsOf(tasks.CachedInfo().Config); k++ {
		name := names.PartitionStream(k)
		part, err := c.js.Stream(ctx, name)
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			return st, &spool.NotProvisionedError{Kind: "stream", Name: name, Err: err}
		}
		if err != nil {
			return st, fmt.Errorf("reading stream %q: %w", name, err)
		}
		parts = append(parts, part)
		st.StoreBytes += part.CachedInfo().State.Bytes
	}
	st.Consumers = streams.ConsumersOf(tasks.CachedInfo().Config)
	byType := st.Consumers == streams.ConsumersByType
	for _, p := range spool.Priorities {
		st.Priorities = append(st.Priorities, PriorityStatus{Priority: p})
	}
	for _, part := range parts {
		cons, err := c.priorityConsumers(ctx, part, byType)
		if err != nil {
			return st, err
		}
		for _, p := range spool.Priorities {
			for _, info := range cons[p] {
				if err := addConsumer(ctx, part, info, &st.Priorities[p]); err != nil {
					return st, err
				}
			}
		}
		if byType {
			un, err := c.unserved(ctx, part, cons)
			if err != nil {
				return st, err
			}
			st.Unserved = append(st.Unserved, un...)
		}
	}
	if byType {
		if err := c.recordedPauses(ctx, st.Priorities); err != nil {
			return st, err
		}
	}
	// The places beside the task subjects (streams.Places), all in
	// SPOOL_TASKS.
	waiting, err := streams.CountWaiting(ctx, tasks, names)
	if err != nil {
		return st, err
	}
	st.Scheduled = waiting[streams.PlaceScheduled]
	st.Parked = waiting[streams.PlaceParked]
	st.Held = waiting[streams.PlaceHeld]
	st.WaitingRoom = waiting[streams.PlaceWaitingRoom]
	st.StoreBytes += tasks.CachedInfo().State.Bytes
	if st.DeadLetters, err = c.streamMsgs(ctx, names.DLQStream()); err != nil {
		return st, err
	}
	if st.Results, err = c.streamMsgs(ctx, "KV_"+names.ResultsBucket()); err != nil {
		return st, err
	}
	if st.Types, err = c.types(ctx); err != nil {
		return st, err
	}
	store, err := limits.Open(ctx, c.js, names)
	if err == nil {
		st.Limits, err = store.Usage(ctx)
	}
	if err != nil && !errors.Is(err, jetstream.ErrBucketNotFound) { // not found: provisioned before flow control
		st.LimitsError = err.Error()
	}
	return st, nil
}

func (c *Client) streamMsgs(ctx context.Context, name string) (uint64, error) {
	s, err := c.js.Stream(ctx, name)
	if err != nil {
		return 0, fmt.Errorf("reading stream %q: %w", name, err)
	}
	return s.CachedInfo().State.Msgs, nil
}

// consumerError reports a priority consumer that cannot be read, a missing
// one as not provisioned.
func consumerError(name string, err error) error {
	if errors.Is(err, jetstream.ErrConsumerNotFound) {
		return &spool.NotProvisionedError{Kind: "consumer", Name: name, Err: err}
	}
	return fmt.Errorf("reading consumer %q: %w", name, err)
}

// addConsumer adds one consumer of a priority on one task partition to
// ps: counts summed, paused when any of them is, the oldest wait the
// longest.
func addConsumer(ctx context.Context, part jetstream.Stream, info *jetstream.ConsumerInfo, ps *PriorityStatus) error {
	ps.Pending += info.NumPending
	ps.InFlight += info.NumAckPending
	ps.Redelivered += info.NumRedelivered
	if info.Paused {
		ps.Paused = true
		if info.Config.PauseUntil != nil {
			until := *info.Config.PauseUntil
			ps.PausedUntil = &until
		}
	}
	if info.NumPending > 0 {
		oldest, err := streams.OldestWaiting(ctx, part, info)
		if err != nil {
			return err
		}
		if !oldest.IsZero() {
			ps.OldestWait = max(ps.OldestWait, time.Since(oldest))
		}
	}
	return nil
}
