package streams_test

import (
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	spool "github.com/spoolq/spool/shared"
	"github.com/spoolq/spool/shared/limits"
	"github.com/spoolq/spool/streams"
	"github.com/spoolq/spool/streams/streamstest"
)

// subsetOf reports whether every subject filter sub matches is matched by
// filter too (NATS wildcards: * one token, > the rest).
func subsetOf(sub, filter string) bool {
	st, ft := strings.Split(sub, "."), strings.Split(filter, ".")
	for i, f := range ft {
		if f == ">" {
			return i < len(st)
		}
		if i >= len(st) || st[i] == ">" || f != "*" && (st[i] == "*" || f != st[i]) {
			return false
		}
	}
	return len(st) == len(ft)
}

func TestSubsetOf(t *testing.T) {
	for _, c := range []struct {
		sub, filter string
		want        bool
	}{
		{"spool.tasks.high.>", "spool.tasks.>", true},
		{"spool.tasks.>", "spool.tasks.high.>", false},
		{"spool.sched.>", "spool.tasks.>", false},
		{"spool.held.=.a", "spool.held.>", true},
		{"spool.held", "spool.held.>", false},
		{"spool.x.*", "spool.x.a", false},
		{"spool.x.a", "spool.x.*", true},
	} {
		if got := subsetOf(c.sub, c.filter); got != c.want {
			t.Errorf("subsetOf(%q, %q) = %v", c.sub, c.filter, got)
		}
	}
}

// stored returns the subject filters a stream config stores messages
// under: its subjects, with its subject transform applied.
func stored(c jetstream.StreamConfig) []string {
	var out []string
	for _, s := range c.Subjects {
		if tr := c.SubjectTransform; tr != nil && s == tr.Source {
			s = tr.Destination
		}
		out = append(out, s)
	}
	return out
}

// Every subject tree of the task streams is a place streams.Places lists,
// and every place is in the task stream: a subject tree added to the
// topology without a place (which cancel, status and the other controls
// would then not search) fails here. Each place is told apart by PlaceOf.
func TestPlacesCoverTheTaskStreams(t *testing.T) {
	names := spool.DefaultNames()
	places := streams.Places(names)
	for _, parts := range []int{1, 3} {
		topo, err := streams.New(names, streams.Settings{Partitions: parts})
		if err != nil {
			t.Fatal(err)
		}
		for k := range parts {
			c := topo.PartitionStreamConfig(k)
			for _, subj := range stored(c) {
				i := slices.IndexFunc(places, func(p streams.PlaceInfo) bool { return subsetOf(subj, p.Filter) })
				switch {
				case i < 0:
					t.Errorf("stream %s stores %s, which no place of streams.Places covers: add a place for it", c.Name, subj)
				case k > 0 && !places[i].Partitioned:
					t.Errorf("partition stream %s stores %s, place %s is listed as SPOOL_TASKS only", c.Name, subj, places[i].Place)
				}
			}
		}
		all := stored(topo.TaskStreamConfig())
		for _, p := range places {
			if !slices.ContainsFunc(all, func(s string) bool { return subsetOf(p.Filter, s) || subsetOf(s, p.Filter) }) {
				t.Errorf("place %s (%s) is not in the task stream's subjects %v", p.Place, p.Filter, all)
			}
		}
	}
	task, _ := names.TaskSubject(spool.High, "email.send")
	sched, _ := names.SchedSubject("t-1")
	parked, _ := names.ParkedSubject(spool.High, "email.send")
	cron, _ := names.CronSubject("nightly")
	sample := map[streams.Place]string{
		streams.PlaceQueued:      task,
		streams.PlaceScheduled:   sched,
		streams.PlaceParked:      parked,
		streams.PlaceHeld:        names.HeldSubject(limits.EncodeKey("acct-1"), "email.send"),
		streams.PlaceWaitingRoom: limits.Room(names, "email.send", "acct-1"),
		streams.PlacePeriodic:    cron,
	}
	seen := map[streams.Place]bool{}
	for _, p := range places {
		if seen[p.Place] {
			t.Errorf("place %s listed twice", p.Place)
		}
		seen[p.Place] = true
		subj, ok := sample[p.Place]
		if !ok {
			t.Errorf("place %s has no sample subject in this test: add one", p.Place)
			continue
		}
		if got, ok := streams.PlaceOf(names, subj); !ok || got != p.Place {
			t.Errorf("PlaceOf(%s) = %q, %v; want %s", subj, got, ok, p.Place)
		}
		if !subsetOf(subj, p.Filter) {
			t.Errorf("place %s: subject %s is outside its filter %s", p.Place, subj, p.Filter)
		}
	}
	if got, ok := streams.PlaceOf(names, limits.Room(names, "email.send", "")); !ok || got != streams.PlaceWaitingRoom {
		t.Errorf("the type's waiting room is place %q, %v", got, ok)
	}
	for _, subj := range []string{"spool.dlq.high.a", "other.tasks.high.a", "spool.tasks"} {
		if got, ok := streams.PlaceOf(names, subj); ok {
			t.Errorf("PlaceOf(%s) = %s, want none", subj, got)
		}
	}
}

// startJS starts a server with the topology of s provisioned and connects
// a JetStream client to it.
func startJS(t *testing.T, s streams.Settings) (*streamstest.Env, jetstream.JetStream) {
	t.Helper()
	env := streamstest.Start(t, s)
	js, err := jetstream.New(env.Connect(t))
	if err != nil {
		t.Fatal(err)
	}
	return env, js
}

// FindTask finds a task by id in each place of the task stream, tells
// where, and skips periodic schedules; CountWaiting counts the places
// beside the task subjects.
func TestFindTaskInEveryPlace(t *testing.T) {
	t.Parallel()
	env, js := startJS(t, streams.Settings{})
	ctx := streamstest.Context(t)
	names := spool.DefaultNames()
	task, _ := names.TaskSubject(spool.Normal, "email.send")
	sched, _ := names.SchedSubject("in-sched")
	parked, _ := names.ParkedSubject(spool.Normal, "email.send")
	cron, _ := names.CronSubject("in-cron")
	put := func(subject, id string, h nats.Header) {
		t.Helper()
		m := nats.NewMsg(subject)
		for k, v := range h {
			m.Header[k] = v
		}
		m.Header.Set(spool.HeaderTaskID, id)
		if _, err := js.PublishMsg(ctx, m); err != nil {
			t.Fatalf("publishing to %s: %v", subject, err)
		}
	}
	at := nats.Header{spool.HeaderSchedule: {"@at 2099-01-01T00:00:00Z"}, spool.HeaderScheduleTarget: {task}}
	want := map[string]streams.Place{
		"in-tasks":  streams.PlaceQueued,
		"in-sched":  streams.PlaceScheduled,
		"in-parked": streams.PlaceParked,
		"in-held":   streams.PlaceHeld,
		"in-room":   streams.PlaceWaitingRoom,
	}
	put(cron, "in-cron", nats.Header{spool.HeaderSchedule: {"@every 1h"}, spool.HeaderScheduleTarget: {task}})
	put(task, "in-tasks", nil)
	put(sched, "in-sched", at)
	put(parked, "in-parked", nil)
	put(names.HeldSubject(limits.EncodeKey("acct-1"), "email.send"), "in-held", nats.Header{spool.HeaderHeldTarget: {task}})
	put(limits.Room(names, "email.send", ""), "in-room", nats.Header{spool.HeaderHeldTarget: {task}})
	tasks := env.Stream(t, names.TaskStream())
	for id, place := range want {
		f, err := streams.FindTask(ctx, tasks, names, id)
		if err != nil {
			t.Fatalf("finding %s: %v", id, err)
		}
		if f == nil || f.Place != place || f.Stream != names.TaskStream() {
			t.Errorf("task %s: found %+v, want place %s", id, f, place)
		}
	}
	for _, id := range []string{"in-cron", "nowhere"} {
		if f, err := streams.FindTask(ctx, tasks, names, id); err != nil || f != nil {
			t.Errorf("task %s: found %+v (%v), want none", id, f, err)
		}
	}
	counts, err := streams.CountWaiting(ctx, tasks, names)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []streams.Place{streams.PlaceScheduled, streams.PlaceParked, streams.PlaceHeld, streams.PlaceWaitingRoom} {
		if counts[p] != 1 {
			t.Errorf("CountWaiting: %d in %s, want 1 (%v)", counts[p], p, counts)
		}
	}
	if counts[streams.PlaceQueued] != 0 || len(counts) != 4 {
		t.Errorf("CountWaiting counts the task subjects or misses a place: %v", counts)
	}
}

// FindTask finds a queued task published without an id by the id its
// sequence gives it in its stream: the plain sequence on SPOOL_TASKS,
// p<k>-<seq> on partition k, never the other partition's task.
func TestFindTaskBySequence(t *testing.T) {
	t.Parallel()
	env, js := startJS(t, streams.Settings{Partitions: 2})
	ctx := streamstest.Context(t)
	names := spool.DefaultNames()
	var seqs [2]uint64
	for k := range 2 {
		// The server's mapping would move a task publish here.
		subject := strings.TrimSuffix(names.PartitionFilter(k), ">") + "normal.email"
		ack, err := js.Publish(ctx, subject, nil)
		if err != nil {
			t.Fatal(err)
		}
		if ack.Stream != names.PartitionStream(k) {
			t.Fatalf("%s stored in %s, want %s", subject, ack.Stream, names.PartitionStream(k))
		}
		seqs[k] = ack.Sequence
	}
	if seqs[0] != seqs[1] {
		t.Fatalf("partitions stored the tasks at %v, want one sequence", seqs)
	}
	plain := strconv.FormatUint(seqs[0], 10)
	for k, c := range []struct{ found, other string }{{plain, "p1-" + plain}, {"p1-" + plain, plain}} {
		part := env.Stream(t, names.PartitionStream(k))
		f, err := streams.FindTask(ctx, part, names, c.found)
		if err != nil {
			t.Fatal(err)
		}
		if f == nil || f.Place != streams.PlaceQueued || f.Stream != names.PartitionStream(k) || f.Msg.Sequence != seqs[k] {
			t.Errorf("task %s: found %+v, want the queued task %d of %s", c.found, f, seqs[k], names.PartitionStream(k))
		}
		if f, err := streams.FindTask(ctx, part, names, c.other); err != nil || f != nil {
			t.Errorf("task %s in %s: found %+v (%v), want none", c.other, names.PartitionStream(k), f, err)
		}
	}
}
