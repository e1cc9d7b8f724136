package streams

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/nats-io/nats.go/jetstream"

	spool "github.com/spoolq/spool/shared"
)

// Place is a kind of place in the task stream where a task waits or runs.
// Every control that looks for a task by id (cancel) and every count of
// waiting tasks (status) goes through Places, PlaceOf and FindTask, so a
// task is found wherever it is.
type Place string

const (
	// PlaceQueued is a task subject, spool.tasks.<priority>.<type>: the
	// task is queued, running, or waiting out a retry backoff (delivered,
	// NAKed with a delay, not acked). The consumer's state tells which;
	// the message is the same.
	PlaceQueued Place = "queued"
	// PlaceScheduled is a one-shot schedule, spool.sched.<id>: a delayed
	// task, or one a worker handed back for later (a rate limit that is
	// full, a type pause on a stream without parked subjects).
	PlaceScheduled Place = "scheduled"
	// PlaceParked is spool.parked.<priority>.<type>: the task's type is
	// paused; the fleet moves it back when the type is resumed.
	PlaceParked Place = "parked"
	// PlaceHeld is spool.held.<keytoken>.<type>: the task waits for its
	// ordered or fair key's turn.
	PlaceHeld Place = "held"
	// PlaceWaitingRoom is spool.held.=<keytoken>.<type> (or
	// spool.held.=.<type>): the task waits for a slot of a full
	// concurrency limit.
	PlaceWaitingRoom Place = "waiting_room"
	// PlacePeriodic is spool.cron.<name>: a periodic schedule. It is not a
	// task; each tick publishes a new task to a task subject.
	PlacePeriodic Place = "periodic"
)

// PlaceInfo describes one place: the subject filter of its messages in the
// task stream and what a message there means. Several places may share a
// filter (held keys and waiting rooms); PlaceOf tells them apart.
type PlaceInfo struct {
	Place  Place
	Filter string
	// Task is false for a place whose messages are not tasks (periodic
	// schedules).
	Task bool
	// Partitioned is set for the place every task partition's stream
	// holds; the other places live in the task stream SPOOL_TASKS only.
	Partitioned bool
	Meaning     string
}

// Places lists every place of the task streams, the task subjects first.
func Places(names spool.Names) []PlaceInfo {
	return []PlaceInfo{
		{PlaceQueued, names.Prefix() + ".tasks.>", true, true, "queued, running, or waiting out a retry backoff"},
		{PlaceScheduled, names.SchedFilter(), true, false, "delayed, or handed back by a full rate limit until its schedule fires"},
		{PlaceParked, names.ParkedFilter(), true, false, "parked while its type is paused"},
		{PlaceHeld, names.HeldFilter(), true, false, "held until its ordered or fair key's turn"},
		{PlaceWaitingRoom, names.HeldFilter(), true, false, "waiting for a slot of a full concurrency limit"},
		{PlacePeriodic, names.CronFilter(), false, false, "a periodic schedule: not a task, it fires tasks onto task subjects"},
	}
}

// PlaceOf tells which place a stored message's subject is in; ok is false
// for a subject of no place.
func PlaceOf(names spool.Names, subject string) (place Place, ok bool) {
	tail, ok := strings.CutPrefix(subject, names.Prefix()+".")
	head, rest, found := strings.Cut(tail, ".")
	if !ok || !found || rest == "" {
		return "", false
	}
	switch head {
	case "tasks":
		return PlaceQueued, true
	case "sched":
		return PlaceScheduled, true
	case "parked":
		return PlaceParked, true
	case "cron":
		return PlacePeriodic, true
	case "held":
		token, _, err := names.ParseHeldSubject(subject)
		if err != nil {
			return "", false
		}
		// A waiting room's token starts with "=" (limits.RoomToken),
		// which never begins an ordered key's token.
		if strings.HasPrefix(token, "=") {
			return PlaceWaitingRoom, true
		}
		return PlaceHeld, true
	}
	return "", false
}

// Found is a task message found by id, and where.
type Found struct {
	Msg   *jetstream.RawStreamMsg
	Place Place
	// Stream is the name of the stream it is in.
	Stream string
}

// TaskSubject returns the task subject the found task runs from:
// its own subject when queued, else where it goes when its schedule
// fires, its type is resumed or its turn or slot comes. Empty when the
// message does not say.
func (f *Found) TaskSubject(names spool.Names) string {
	h := f.Msg.Header
	switch f.Place {
	case PlaceQueued:
		return f.Msg.Subject
	case PlaceScheduled:
		return h.Get(spool.HeaderScheduleTarget)
	case PlaceParked:
		if s := h.Get(spool.HeaderOriginalSubject); s != "" {
			return s
		}
		p, typ, err := names.ParseParkedSubject(f.Msg.Subject)
		if err != nil {
			return ""
		}
		s, _ := names.TaskSubject(p, typ)
		return s
	case PlaceHeld, PlaceWaitingRoom:
		return h.Get(spool.HeaderHeldTarget)
	}
	return ""
}

// FindTask looks for task id in every place of a task stream (Places),
// oldest message first, by its Spool-Task-Id or Nats-Msg-Id header: a
// queued, running or retrying task, a schedule, a parked task, a task
// held for its key's turn or waiting in a concurrency limit's waiting
// room, or a queued task whose sequence is its id. It returns nil when no
// task carries the id. It reads one message per request, so it takes as
// long as the stream is deep: bound it with ctx.
func FindTask(ctx context.Context, tasks jetstream.Stream, names spool.Names, id string) (*Found, error) {
	name := tasks.CachedInfo().Config.Name
	seq, scanned := uint64(1), 0
	for {
		// ">" reads the next message on any subject: one pass over the
		// stream whatever the places it holds.
		msg, err := tasks.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(">"))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return nil, nil
		}
		if err != nil {
			return nil, fmt.Errorf("looking for task %q in %s (%d messages read): %w", id, name, scanned, err)
		}
		scanned++
		seq = msg.Sequence + 1
		place, ok := PlaceOf(names, msg.Subject)
		if !ok || place == PlacePeriodic {
			continue
		}
		// A queued task published without an id is named by its sequence
		// in this stream (Names.TaskID).
		if msg.Header.Get(spool.HeaderTaskID) == id || msg.Header.Get(spool.HeaderMsgID) == id ||
			place == PlaceQueued && names.TaskID(msg.Header, name, msg.Sequence) == id {
			return &Found{Msg: msg, Place: place, Stream: name}, nil
		}
	}
}

// CountWaiting counts the messages of the task stream (SPOOL_TASKS) in the
// places beside the task subjects: schedules, parked, held and waiting
// rooms. The task subjects are counted by their consumers (pending, ack
// pending), which also tell queued from running. A few requests, whatever
// the backlog: one stream info per filter.
func CountWaiting(ctx context.Context, tasks jetstream.Stream, names spool.Names) (map[Place]uint64, error) {
	counts := map[Place]uint64{}
	seen := map[string]bool{}
	for _, pl := range Places(names) {
		if pl.Partitioned || !pl.Task || seen[pl.Filter] {
			continue
		}
		seen[pl.Filter] = true
		info, err := tasks.Info(ctx, jetstream.WithSubjectFilter(pl.Filter))
		if err != nil {
			return nil, fmt.Errorf("counting the tasks on %s in %s: %w", pl.Filter, names.TaskStream(), err)
		}
		for subj, n := range info.State.Subjects {
			if place, ok := PlaceOf(names, subj); ok {
				counts[place] += n
			}
		}
	}
	return counts, nil
}
