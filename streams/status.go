package streams

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	spool "github.com/spoolq/spool/shared"
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
}

// Status is a snapshot of the whole queue.
type Status struct {
	Priorities []PriorityStatus `json:"priorities"`
	// Scheduled counts delayed tasks whose time has not come.
	Scheduled uint64 `json:"scheduled"`
	// DeadLetters is the number of messages in the DLQ stream.
	DeadLetters uint64 `json:"dead_letters"`
	// Results is the number of result documents kept.
	Results uint64 `json:"results"`
	// StoreBytes is the task stream's size on the server.
	StoreBytes uint64 `json:"store_bytes"`
}

// ReadStatus reads a Status from the server.
func ReadStatus(ctx context.Context, js jetstream.JetStream, names spool.Names) (Status, error) {
	var st Status
	tasks, err := js.Stream(ctx, names.TaskStream())
	if err != nil {
		return st, fmt.Errorf("reading stream %q: %w", names.TaskStream(), err)
	}
	now := time.Now()
	for _, p := range spool.Priorities {
		c, err := tasks.Consumer(ctx, names.Consumer(p))
		if err != nil {
			return st, fmt.Errorf("reading consumer %q: %w", names.Consumer(p), err)
		}
		info := c.CachedInfo()
		ps := PriorityStatus{
			Priority:    p,
			Pending:     info.NumPending,
			InFlight:    info.NumAckPending,
			Redelivered: info.NumRedelivered,
		}
		if ps.Pending > 0 {
			oldest, err := OldestWaiting(ctx, tasks, names, p, info)
			if err != nil {
				return st, err
			}
			if !oldest.IsZero() {
				ps.OldestWait = now.Sub(oldest)
			}
		}
		st.Priorities = append(st.Priorities, ps)
	}
	info, err := tasks.Info(ctx, jetstream.WithSubjectFilter(names.SchedFilter()))
	if err != nil {
		return st, fmt.Errorf("reading stream %q: %w", names.TaskStream(), err)
	}
	for _, n := range info.State.Subjects {
		st.Scheduled += n
	}
	st.StoreBytes = info.State.Bytes
	if st.DeadLetters, err = streamMsgs(ctx, js, names.DLQStream()); err != nil {
		return st, err
	}
	if st.Results, err = streamMsgs(ctx, js, "KV_"+names.ResultsBucket()); err != nil {
		return st, err
	}
	return st, nil
}

// OldestWaiting returns the stream time of the oldest task of priority p not
// yet delivered, or the zero time when there is none. info is the priority
// consumer's current info.
func OldestWaiting(ctx context.Context, tasks jetstream.Stream, names spool.Names, p spool.Priority, info *jetstream.ConsumerInfo) (time.Time, error) {
	msg, err := tasks.GetMsg(ctx, info.Delivered.Stream+1, jetstream.WithGetMsgSubject(names.PriorityFilter(p)))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return time.Time{}, nil
	}
	if err != nil {
		return time.Time{}, fmt.Errorf("reading the oldest %s task: %w", p, err)
	}
	return msg.Time, nil
}

func streamMsgs(ctx context.Context, js jetstream.JetStream, name string) (uint64, error) {
	s, err := js.Stream(ctx, name)
	if err != nil {
		return 0, fmt.Errorf("reading stream %q: %w", name, err)
	}
	return s.CachedInfo().State.Msgs, nil
}
