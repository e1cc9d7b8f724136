package flow_test

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/spoolq/spool/consumer/flow"
	spool "github.com/spoolq/spool/shared"
	"github.com/spoolq/spool/shared/limits"
	"github.com/spoolq/spool/streams"
	"github.com/spoolq/spool/streams/streamstest"
)

// oneSlot starts a server with the rule "one": concurrency 1, and
// returns it with the type's task subject and a subscription that sees
// every task released there.
func oneSlot(t *testing.T) (*streamstest.Env, string, *nats.Subscription) {
	t.Helper()
	e := streamstest.Start(t, streams.Settings{})
	putRule(t, e, limits.Rule{Type: "one", Concurrency: 1})
	target, err := e.Names.TaskSubject(spool.Normal, "one")
	if err != nil {
		t.Fatal(err)
	}
	released, err := e.NC.SubscribeSync(target)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = released.Unsubscribe() })
	return e, target, released
}

// A park and a release of the one slot of a limit race, many times over,
// each on its own limiter (two workers): whichever comes first, the parked
// task is released with the slot, never left in the waiting room (there is
// no sweep here to rescue it). The releaser reads the room after freeing
// the slot; the parker takes a slot it sees free after its park.
func TestParkAndReleaseNeverMissEachOther(t *testing.T) {
	t.Parallel()
	e, target, released := oneSlot(t)
	ctx := streamstest.Context(t)
	holder := newLimiter(t, e, "holder", 10*time.Second)
	defer func() { holder.Close() }()
	parker := newLimiter(t, e, "parker", 10*time.Second)
	defer parker.Close()
	room := limits.Room(e.Names, "one", "")
	const rounds = 30
	for i := range rounds {
		lease, err := holder.Acquire(ctx, "one", "", fmt.Sprintf("h%d", i))
		if err != nil {
			t.Fatalf("round %d: the holder's acquire: %v", i, err)
		}
		denied := &flow.DeniedError{Limit: "concurrency", Type: "one"}
		id := fmt.Sprintf("p%d", i)
		var wg sync.WaitGroup
		wg.Go(func() {
			h := nats.Header{}
			h.Set(spool.HeaderTaskID, id)
			if err := parker.Park(ctx, denied, "", id+"-room", &nats.Msg{Subject: target, Header: h}); err != nil {
				t.Errorf("round %d: park: %v", i, err)
				return
			}
			parker.Wake(ctx, denied, "")
		})
		wg.Go(func() { lease.Release(ctx) })
		wg.Wait()
		// The parked task comes out with the slot, whoever saw whom.
		m, err := released.NextMsg(10 * time.Second)
		if err != nil {
			t.Fatalf("round %d: task %s not released from the waiting room: %v", i, id, err)
		}
		if got := m.Header.Get(spool.HeaderTaskID); got != id {
			t.Fatalf("round %d: released %q, want %q", i, got, id)
		}
		gs := flow.GrantsOf(m.Header)
		if len(gs) != 1 || gs[0].Slot != limits.SlotKey("one", "", 0) {
			t.Fatalf("round %d: released with grants %v, want slot 0 of the limit", i, gs)
		}
		// It runs on the slot it was handed, and gives it back.
		run, err := holder.AcquireGranted(ctx, "one", "", id, gs)
		if err != nil {
			t.Fatalf("round %d: taking over the granted slot: %v", i, err)
		}
		run.Release(ctx)
		holder.Close() // waits for the release's hand-on
		holder = newLimiter(t, e, "holder", 10*time.Second)
	}
	tasks, err := e.JS.Stream(ctx, e.Names.TaskStream())
	if err != nil {
		t.Fatal(err)
	}
	if m, err := tasks.GetMsg(ctx, 0, jetstream.WithGetMsgSubject(room)); !errors.Is(err, jetstream.ErrMsgNotFound) {
		t.Fatalf("the waiting room still holds a task (%v, %v)", m, err)
	}
}

// Slots are handed on in arrival order: tasks parked one after another
// are released one after another as the slot is released.
func TestWaitingRoomKeepsArrivalOrder(t *testing.T) {
	t.Parallel()
	e, target, released := oneSlot(t)
	ctx := streamstest.Context(t)
	l := newLimiter(t, e, "w", 10*time.Second)
	defer l.Close()
	lease, err := l.Acquire(ctx, "one", "", "first")
	if err != nil {
		t.Fatal(err)
	}
	const n = 5
	for i := range n {
		_, err := l.Acquire(ctx, "one", "", fmt.Sprint(i))
		var denied *flow.DeniedError
		if !errors.As(err, &denied) {
			t.Fatalf("acquire %d with the slot held: %v, want a DeniedError", i, err)
		}
		h := nats.Header{}
		h.Set(spool.HeaderTaskID, fmt.Sprint(i))
		if err := l.Park(ctx, denied, "", fmt.Sprint(i), &nats.Msg{Subject: target, Header: h}); err != nil {
			t.Fatal(err)
		}
	}
	store, err := limits.Open(ctx, e.JS, e.Names)
	if err != nil {
		t.Fatal(err)
	}
	waiting := func() int {
		t.Helper()
		us, err := store.Usage(ctx)
		if err != nil || len(us) != 1 {
			t.Fatalf("usage: %v, %v", us, err)
		}
		return us[0].Waiting
	}
	if w := waiting(); w != n {
		t.Errorf("usage shows %d tasks waiting for a slot, want %d", w, n)
	}
	for i := range n {
		lease.Release(ctx)
		m, err := released.NextMsg(10 * time.Second)
		if err != nil {
			t.Fatalf("waiting task %d not released: %v", i, err)
		}
		if got := m.Header.Get(spool.HeaderTaskID); got != fmt.Sprint(i) {
			t.Fatalf("released task %q, want %d (arrival order)", got, i)
		}
		if lease, err = l.AcquireGranted(ctx, "one", "", fmt.Sprint(i), flow.GrantsOf(m.Header)); err != nil || lease == nil {
			t.Fatalf("task %d taking over its slot: %v", i, err)
		}
	}
	lease.Release(ctx)
	streamstest.WaitFor(t, 10*time.Second, func() error {
		// The held copy is deleted just after its release is published.
		if w := waiting(); w != 0 {
			return fmt.Errorf("usage shows %d tasks waiting for a slot after all were released, want 0", w)
		}
		if st := l.Stats()["one"]; st.Parked["concurrency"] != n || st.Released != n {
			return fmt.Errorf("stats: parked %d, released %d, want %d each", st.Parked["concurrency"], st.Released, n)
		}
		return nil
	})
}
