package consumer

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	spool "github.com/spoolq/spool/shared"
)

// A delayed task is a one-shot schedule on <prefix>.sched.<id>. The server
// also accepts a repeating pattern there, and subject permissions cannot
// see headers, so any role that may enqueue delayed tasks could make a
// periodic task, which only operators may set (<prefix>.cron.<name>). The
// worker refuses what such a schedule fires: it removes the schedule and
// dead-letters the task as bad input, so it fires at most a few times and
// never runs.

// repeatingError is the cause a task fired by the repeating schedule on
// subject sched is dead-lettered with.
func repeatingError(names spool.Names, sched string) error {
	p := names.Prefix()
	return fmt.Errorf("task fired by the repeating schedule %s: repeating schedules on %s.sched are refused "+
		"(a delayed task is a one-shot @at schedule); periodic tasks belong on %s.cron.<name>, which operators set", sched, p, p)
}

// repeatingSched returns the schedule subject of a task that a repeating
// schedule under <prefix>.sched. fired, and "" for any other task. It only
// reads two headers, so every task pays almost nothing for it.
func repeatingSched(names spool.Names, hdr nats.Header) string {
	next := hdr.Get(spool.HeaderScheduleNext)
	if next == "" || next == spool.ScheduleNextPurge {
		return ""
	}
	sched := hdr.Get(spool.HeaderScheduler)
	if !strings.HasPrefix(sched, names.Prefix()+".sched.") {
		return ""
	}
	return sched
}

// refuseRepeating removes the repeating schedule on subject sched that
// fired a's task, so it fires no more, and dead-letters the task as bad
// input. A failed removal is logged: the task is dead-lettered anyway,
// and the schedule's next task tries again.
func (s *admission) refuseRepeating(a attemptInfo, sched string) {
	a.maxAttempts = a.attempt
	if err := s.removeRepeating(a, sched); err != nil {
		s.io.log.Error("removing a repeating schedule on a delayed-task subject failed; its next task tries again",
			"task_id", a.id, "schedule", sched, "error", err)
	} else {
		s.io.log.Warn("repeating schedule on a delayed-task subject removed; its task is dead-lettered",
			"task_id", a.id, "schedule", sched)
	}
	s.settle.deadLetter(a, spool.ReasonBadInput, repeatingError(s.policy.Names, sched), outcome{failed: true, pickup: -1})
}

// removeRepeating deletes the repeating schedules stored on subject
// sched of the task stream, where schedules live. It reads the subject's
// messages in order with direct gets by subject (the consumer role may
// send those, and a schedule is normally the subject's only message). A
// one-shot schedule published there since is a delayed task and stays.
func (s *admission) removeRepeating(a attemptInfo, sched string) error {
	for seq := uint64(0); ; seq++ {
		var msg *jetstream.RawStreamMsg
		err := s.io.write(a, "looking up schedule "+sched, func(ctx context.Context) (err error) {
			msg, err = s.tasks.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(sched))
			return err
		})
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("looking up schedule %s: %w", sched, err)
		}
		seq = msg.Sequence
		if pattern := msg.Header.Get(spool.HeaderSchedule); pattern == "" || strings.HasPrefix(pattern, "@at ") {
			continue
		}
		err = s.io.write(a, "deleting schedule "+sched, func(ctx context.Context) error {
			return s.tasks.DeleteMsg(ctx, msg.Sequence)
		})
		var apiErr *jetstream.APIError
		if err != nil && !errors.Is(err, jetstream.ErrMsgNotFound) &&
			!(errors.As(err, &apiErr) && apiErr.ErrorCode == jetstream.JSErrCodeMessageNotFound) {
			return fmt.Errorf("deleting schedule %s (seq %d): %w", sched, msg.Sequence, err)
		}
	}
}
