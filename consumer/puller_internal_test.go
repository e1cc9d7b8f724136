package consumer

import (
	"errors"
	"io"
	"log/slog"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	spool "github.com/spoolq/spool/shared"
)

// pullRecorder is a worker as the puller sees it, recording what it is
// told.
type pullRecorder struct {
	slots   *slots
	empty   []int
	pending map[int]uint64
	started []int
	failed  []error
	nudges  int
	// queued are the lanes of tasks queued for a slot; roundTrips counts
	// the no-wait fetches that ended.
	queued     []int
	roundTrips int
}

func (r *pullRecorder) pendingLocked(lane int, n uint64) { r.pending[lane] = n }
func (r *pullRecorder) emptyLocked(lane int)             { r.empty = append(r.empty, lane) }
func (r *pullRecorder) admitLocked(lane int, poll bool, _ jetstream.Msg) (start, handBack bool) {
	if !r.slots.runnable(poll) {
		r.slots.enqueue()
		r.queued = append(r.queued, lane)
		return false, false
	}
	r.slots.take(lanePriority(lane))
	return true, false
}
func (r *pullRecorder) roundTripLocked(time.Duration)          { r.roundTrips++ }
func (r *pullRecorder) startAttempt(lane int, _ jetstream.Msg) { r.started = append(r.started, lane) }
func (r *pullRecorder) pullFailed(_ int, err error)            { r.failed = append(r.failed, err) }
func (r *pullRecorder) nudge()                                 { r.nudges++ }

// newTestPuller is a puller of two partitions, SPOOL_TASKS and
// SPOOL_TASKS_1: ten lanes.
func newTestPuller() (*puller, *pullRecorder) {
	s := newSlots(1, 8)
	ev := &pullRecorder{slots: &s, pending: make(map[int]uint64)}
	pl := &puller{
		log:      slog.New(slog.NewTextHandler(io.Discard, nil)),
		pollWait: time.Second,
		ev:       ev,
		prefix:   "_INBOX.test.",
		mu:       &sync.Mutex{},
		slots:    &s,
		pulls:    &sync.WaitGroup{},
	}
	names := spool.DefaultNames()
	pl.setLanes(priorityLanes(names, []string{names.PartitionStream(0), names.PartitionStream(1)}))
	return pl, ev
}

// What each kind of status does to the request it answers: a heartbeat
// leaves it outstanding, 404 and 408 end it normally (a short no-wait
// fetch says the priority is empty), and every other status ends it as a
// failed pull, its slots given back.
func TestPullerStatuses(t *testing.T) {
	t.Parallel()
	cases := []struct {
		code, desc string
		poll       bool
		ends       bool
		failed     bool
		empty      bool
	}{
		{"100", "Idle Heartbeat", true, false, false, false},
		{"404", "No Messages", false, true, false, true},
		{"408", "Request Timeout", true, true, false, false},
		{"409", "Consumer Deleted", true, true, true, false},
		{"409", "Leadership Change", false, true, true, false},
		{"409", "Exceeded MaxWaiting", true, true, true, false},
		{"409", "Exceeded MaxRequestBatch of 1", false, true, true, false},
		{"400", "Bad Request", false, true, true, false},
		{"503", "", false, true, true, false},
	}
	for _, c := range cases {
		pl, ev := newTestPuller()
		n := 3
		if c.poll {
			n = 1
		}
		lane := laneOf(1, spool.High)
		pl.mu.Lock()
		pl.slots.reserve(n, c.poll)
		plan := pl.planLocked(lane, n, c.poll)
		pl.mu.Unlock()
		h := nats.Header{"Status": {c.code}}
		if c.desc != "" {
			h.Set("Description", c.desc)
		}
		pl.onMsg(&nats.Msg{Subject: pl.prefix + strconv.Itoa(lane) + "." + strconv.FormatUint(plan.id, 36), Header: h})

		name := c.code + " " + c.desc
		outstanding := pl.outstanding(lane)
		reserved := pl.slots.fetching + pl.slots.polling
		switch {
		case outstanding == c.ends:
			t.Errorf("%s: request outstanding %v", name, outstanding)
		case c.ends && reserved != 0:
			t.Errorf("%s: %d slots still reserved", name, reserved)
		case !c.ends && reserved != n:
			t.Errorf("%s: %d slots reserved, want %d", name, reserved, n)
		case (len(ev.failed) > 0) != c.failed:
			t.Errorf("%s: failed pulls %v", name, ev.failed)
		case (len(ev.empty) > 0) != c.empty:
			t.Errorf("%s: priority made empty: %v", name, ev.empty)
		}
		if err := pl.slots.check(); err != nil {
			t.Errorf("%s: %v", name, err)
		}
		if c.code == "409" && c.desc == "Consumer Deleted" && (len(ev.failed) == 0 || !errors.Is(ev.failed[0], jetstream.ErrConsumerDeleted)) {
			t.Errorf("%s: failure %v, want jetstream.ErrConsumerDeleted", name, ev.failed)
		}
	}
}

// A no-wait fetch pulled ahead: the tasks it brings beyond the idle slots
// are queued, not started, and its end records a round trip.
func TestPullerQueuesTasksPulledAhead(t *testing.T) {
	t.Parallel()
	pl, ev := newTestPuller()
	lane := laneOf(0, spool.High)
	pl.mu.Lock()
	pl.slots.ahead = 2
	n := pl.slots.free() // the pool's one idle slot and 2 ahead
	pl.slots.reserve(n, false)
	pl.planLocked(lane, n, false)
	pl.mu.Unlock()
	for i := range n {
		seq := strconv.Itoa(i + 1)
		pl.onMsg(&nats.Msg{Subject: "spool.tasks.high.work", Reply: "$JS.ACK.SPOOL_TASKS.spool-high.1." + seq + "." + seq + ".1795316429644390470.0"})
	}
	if n != 3 || pl.slots.busy != 1 || len(ev.started) != 1 || pl.slots.queued != 2 || len(ev.queued) != 2 || ev.roundTrips != 1 || pl.outstanding(lane) {
		t.Fatalf("asked for %d: busy %d, started %v, queued %d (%v), round trips %d, outstanding %v",
			n, pl.slots.busy, ev.started, pl.slots.queued, ev.queued, ev.roundTrips, pl.outstanding(lane))
	}
	if err := pl.slots.check(); err != nil {
		t.Fatal(err)
	}
}
