package flow_test

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/spoolq/spool/consumer/flow"
	"github.com/spoolq/spool/shared/limits"
	"github.com/spoolq/spool/streams"
	"github.com/spoolq/spool/streams/streamstest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func newLimiter(t *testing.T, e *streamstest.Env, owner string, ttl time.Duration) *flow.Limiter {
	t.Helper()
	l, err := flow.New(streamstest.Context(t), flow.Config{
		JS: e.JS, Conn: e.NC, Names: e.Names, Owner: owner, TTL: ttl,
		IOTimeout: 5 * time.Second, Logger: streamstest.Logger(t),
	})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func putRule(t *testing.T, e *streamstest.Env, r limits.Rule) {
	t.Helper()
	st, err := limits.Open(streamstest.Context(t), e.JS, e.Names)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Put(streamstest.Context(t), r); err != nil {
		t.Fatal(err)
	}
}

// A slot held by a worker that dies (its limiter stops renewing and never
// releases) comes back on its own once the lease TTL runs out.
func TestSlotOfDeadHolderExpires(t *testing.T) {
	t.Parallel()
	e := streamstest.Start(t, streams.Settings{})
	putRule(t, e, limits.Rule{Type: "one", Concurrency: 1})
	ctx := streamstest.Context(t)
	dead := newLimiter(t, e, "dead", time.Second)
	if _, err := dead.Acquire(ctx, "one", "", "t1"); err != nil {
		t.Fatal(err)
	}
	dead.Close() // a crash: no release
	alive := newLimiter(t, e, "alive", time.Second)
	defer alive.Close()
	var denied *flow.DeniedError
	if _, err := alive.Acquire(ctx, "one", "", "t2"); !errors.As(err, &denied) {
		t.Fatalf("second acquire while the first lease lives: %v, want a DeniedError", err)
	}
	start := time.Now()
	var lease *flow.Lease
	streamstest.WaitFor(t, 10*time.Second, func() error {
		var err error
		lease, err = alive.Acquire(ctx, "one", "", "t2")
		return err
	})
	t.Logf("the dead holder's slot came back after %s (TTL 1s)", time.Since(start))
	lease.Release(ctx)
}

// A held slot is renewed past its TTL while the task runs, and released
// at once when it ends.
func TestSlotRenewedAndReleased(t *testing.T) {
	t.Parallel()
	e := streamstest.Start(t, streams.Settings{})
	putRule(t, e, limits.Rule{Type: "one", Concurrency: 1})
	ctx := streamstest.Context(t)
	a := newLimiter(t, e, "a", time.Second)
	defer a.Close()
	b := newLimiter(t, e, "b", time.Second)
	defer b.Close()
	lease, err := a.Acquire(ctx, "one", "", "t1")
	if err != nil {
		t.Fatal(err)
	}
	// Three TTLs later the slot is still held (renewed every TTL/3).
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) {
		if l2, err := b.Acquire(ctx, "one", "", "t2"); err == nil {
			l2.Release(ctx)
			t.Fatal("a renewed slot was taken by another worker")
		}
	}
	lease.Release(ctx)
	a.Close() // waits for the release's delete
	kv, err := e.JS.KeyValue(ctx, e.Names.LeasesBucket())
	if err != nil {
		t.Fatal(err)
	}
	// Deleted by the release, not left to expire (the TTL is a second).
	if en, err := kv.Get(ctx, limits.SlotKey("one", "", 0)); err == nil {
		t.Fatalf("slot still held after its release: %s (revision %d)", en.Value(), en.Revision())
	}
	var l2 *flow.Lease
	streamstest.WaitFor(t, 5*time.Second, func() (err error) {
		l2, err = b.Acquire(ctx, "one", "", "t2")
		return err
	})
	l2.Release(ctx)
}

// Many goroutines on two limiters racing for 3 slots never hold more than
// 3 at once: the compare-and-set decides, whatever the views say.
func TestSlotsNeverDoubled(t *testing.T) {
	t.Parallel()
	e := streamstest.Start(t, streams.Settings{})
	putRule(t, e, limits.Rule{Type: "three", Concurrency: 3, KeyConcurrency: 1})
	ctx := streamstest.Context(t)
	ls := []*flow.Limiter{newLimiter(t, e, "a", 5*time.Second), newLimiter(t, e, "b", 5*time.Second)}
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	var running, peak, granted atomic.Int64
	var keyRunning [2]atomic.Int64
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Go(func() {
			for i := range 15 {
				key := fmt.Sprint(i % 2)
				lease, err := ls[g%2].Acquire(ctx, "three", key, fmt.Sprintf("g%d-%d", g, i))
				var d *flow.DeniedError
				if errors.As(err, &d) {
					continue
				}
				if err != nil {
					t.Error(err)
					return
				}
				granted.Add(1)
				n := running.Add(1)
				for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
				}
				if k := keyRunning[i%2].Add(1); k > 1 {
					t.Errorf("key %s held %d times at once", key, k)
				}
				time.Sleep(time.Millisecond) // the task "runs"
				keyRunning[i%2].Add(-1)
				running.Add(-1)
				lease.Release(ctx)
			}
		})
	}
	wg.Wait()
	if p := peak.Load(); p > 2 {
		t.Errorf("peak %d holders, want at most 2 (3 type slots, but 2 keys of 1 slot each)", p)
	}
	if granted.Load() == 0 {
		t.Error("no slot was ever granted")
	}
	t.Logf("%d leases granted, peak %d", granted.Load(), peak.Load())
}

// A rule put in the bucket is in force in a running limiter within a
// second, and deleting it lifts the limit.
func TestRuleChangeTakesEffect(t *testing.T) {
	t.Parallel()
	e := streamstest.Start(t, streams.Settings{})
	ctx := streamstest.Context(t)
	l := newLimiter(t, e, "a", 5*time.Second)
	defer l.Close()
	if lease, err := l.Acquire(ctx, "later", "", "t0"); err != nil || lease != nil {
		t.Fatalf("no rule: lease %v err %v, want none", lease, err)
	}
	putRule(t, e, limits.Rule{Type: "later", Concurrency: 1})
	streamstest.WaitFor(t, time.Second, func() error {
		if _, ok := l.Rule("later"); !ok {
			return errors.New("rule in force")
		}
		return nil
	})
	st, err := limits.Open(ctx, e.JS, e.Names)
	if err != nil {
		t.Fatal(err)
	}
	lease, err := l.Acquire(ctx, "later", "", "t1")
	if err != nil || lease == nil {
		t.Fatalf("first acquire: %v", err)
	}
	u, err := st.Usage(ctx)
	if err != nil || len(u) != 1 || u[0].Running != 1 {
		t.Fatalf("usage %+v, %v: want one slot running", u, err)
	}
	lease.Release(ctx)
	if err := st.Delete(ctx, "later"); err != nil {
		t.Fatal(err)
	}
	streamstest.WaitFor(t, time.Second, func() error {
		if _, ok := l.Rule("later"); ok {
			return errors.New("rule lifted")
		}
		return nil
	})
}

// Usage reads the fleet's use of every rule from the leases bucket: the
// keys holding the most slots, and a rate limit's next start and the
// tasks it turned away that are booked to come back.
func TestUsageShowsBusiestKeysAndRate(t *testing.T) {
	t.Parallel()
	e := streamstest.Start(t, streams.Settings{})
	ctx := streamstest.Context(t)
	putRule(t, e, limits.Rule{Type: "keyed", KeyConcurrency: 2})
	putRule(t, e, limits.Rule{Type: "paced", Rate: &limits.Rate{Limit: 1, Period: limits.Duration(time.Hour)}})
	l := newLimiter(t, e, "a", 5*time.Second)
	defer l.Close()
	for i, key := range []string{"customer/a", "customer/a", "b"} {
		if _, err := l.Acquire(ctx, "keyed", key, fmt.Sprintf("k%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := l.Acquire(ctx, "paced", "", "p0"); err != nil {
		t.Fatal(err)
	}
	var denied *flow.DeniedError
	for i := 1; i <= 2; i++ {
		if _, err := l.Acquire(ctx, "paced", "", fmt.Sprintf("p%d", i)); !errors.As(err, &denied) {
			t.Fatalf("second start within the hour: %v, want a DeniedError", err)
		}
	}
	st, err := limits.Open(ctx, e.JS, e.Names)
	if err != nil {
		t.Fatal(err)
	}
	us, err := st.Usage(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(us) != 2 {
		t.Fatalf("usage of %d rules, want 2: %+v", len(us), us)
	}
	keyed, paced := us[0], us[1]
	want := []limits.KeyUsage{{Key: "customer/a", Running: 2}, {Key: "b", Running: 1}}
	if fmt.Sprint(keyed.Busiest) != fmt.Sprint(want) || keyed.KeysRunning != 3 || keyed.KeysActive != 2 {
		t.Errorf("keyed usage %+v, want busiest %v, 3 slots of 2 keys", keyed, want)
	}
	if paced.Rate == nil || paced.Rate.NextStart < 59*time.Minute || paced.Rate.Waiting != 2 {
		t.Errorf("paced rate usage %+v, want the next start in about an hour and 2 waiting", paced.Rate)
	}
	if s := l.Stats()["paced"]; s.Acquired != 1 || s.Denied["rate"] != 2 || s.Waiting != 0 {
		t.Errorf("paced stats %+v, want 1 acquired, 2 denied by the rate, none waiting", s)
	}
}

// The tasks of one worker waiting for a rate's starts form a line, first
// come first served, of at most four: the starts go to them in arrival
// order, and the tasks that find the line full are handed back at once
// instead of waiting.
func TestRateLineFirstComeFirstServed(t *testing.T) {
	t.Parallel()
	e := streamstest.Start(t, streams.Settings{})
	putRule(t, e, limits.Rule{Type: "paced", Rate: &limits.Rate{Limit: 5, Period: limits.Duration(time.Second)}})
	ctx := streamstest.Context(t)
	l := newLimiter(t, e, "w", time.Second)
	defer l.Close()
	if _, err := l.Acquire(ctx, "paced", "", "first"); err != nil {
		t.Fatal(err)
	}
	const n = 8
	var (
		mu       sync.Mutex
		started  []int
		finished atomic.Int32
		most     atomic.Int32
		wg       sync.WaitGroup
	)
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			most.Store(max(most.Load(), int32(l.Stats()["paced"].Waiting)))
			select {
			case <-stop:
				return
			case <-time.After(time.Millisecond):
			}
		}
	}()
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer finished.Add(1)
			_, err := l.Acquire(ctx, "paced", "", fmt.Sprint("t", i))
			var denied *flow.DeniedError
			switch {
			case err == nil:
				mu.Lock()
				started = append(started, i)
				mu.Unlock()
			case !errors.As(err, &denied):
				t.Errorf("task %d: %v", i, err)
			}
		}()
		// The next task arrives once this one is in the line or done.
		streamstest.WaitFor(t, 10*time.Second, func() error {
			if got := l.Stats()["paced"].Waiting + int(finished.Load()); got < i+1 {
				return fmt.Errorf("%d of %d tasks in line or done", got, i+1)
			}
			return nil
		})
	}
	wg.Wait()
	close(stop)
	<-sampled
	for j := 1; j < len(started); j++ {
		if started[j] < started[j-1] {
			t.Errorf("starts in the order %v, want arrival order", started)
		}
	}
	if m := most.Load(); m > 4 {
		t.Errorf("%d tasks waited at once for the rate in one worker, want at most 4", m)
	}
	if len(started) == n {
		t.Errorf("all %d tasks started within the wait at 5/s", n)
	}
	t.Logf("started in order %v of %d; most waiting at once %d", started, n, most.Load())
}

// Two workers, each with a dozen tasks arriving at once for one fast rate
// (10 per 100ms, a start every 10.5ms): the heads write the starts due
// within 75ms ahead, up to seven in one write, for themselves and the
// tasks behind them. Every task that is not handed back starts once, and
// no window of a period holds more starts than the limit (three more are
// the jitter between the allowed moment and Acquire's return on a loaded
// machine, a start written at once being taken when the write returns;
// starts written twice would put nearly twice the limit in one).
func TestRateStartsWrittenAhead(t *testing.T) {
	t.Parallel()
	e := streamstest.Start(t, streams.Settings{})
	const limit, period = 10, 100 * time.Millisecond
	putRule(t, e, limits.Rule{Type: "fast", Rate: &limits.Rate{Limit: limit, Period: limits.Duration(period)}})
	ctx := streamstest.Context(t)
	const perWorker = 12
	var (
		mu     sync.Mutex
		starts []time.Time
		denied atomic.Int32
		wg     sync.WaitGroup
	)
	for _, name := range []string{"a", "b"} {
		l := newLimiter(t, e, name, time.Second)
		defer l.Close()
		for i := range perWorker {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, err := l.Acquire(ctx, "fast", "", fmt.Sprint(name, i))
				var d *flow.DeniedError
				switch {
				case err == nil:
					mu.Lock()
					starts = append(starts, time.Now())
					mu.Unlock()
				case errors.As(err, &d):
					denied.Add(1)
				default:
					t.Errorf("task %s%d: %v", name, i, err)
				}
			}()
		}
	}
	wg.Wait()
	if len(starts)+int(denied.Load()) != 2*perWorker {
		t.Fatalf("%d started and %d denied of %d", len(starts), denied.Load(), 2*perWorker)
	}
	if len(starts) < limit {
		t.Errorf("only %d of %d tasks started", len(starts), 2*perWorker)
	}
	slices.SortFunc(starts, time.Time.Compare)
	most := 0
	for i, j := 0, 0; i < len(starts); i++ {
		for j < len(starts) && starts[j].Sub(starts[i]) < period {
			j++
		}
		most = max(most, j-i)
	}
	if most > limit+3 {
		t.Errorf("%d starts in a window of %s, limit %d", most, period, limit)
	}
	t.Logf("%d started, %d handed back, most in a window of %s %d", len(starts), denied.Load(), period, most)
}

// A worker's tasks of a full concurrency limit, one after the other, pass
// their slots on without a write to the leases bucket; a slot the worker
// no longer uses is freed a moment later, and another worker takes it.
func TestReleasedSlotPassesWithoutWrite(t *testing.T) {
	t.Parallel()
	e := streamstest.Start(t, streams.Settings{})
	putRule(t, e, limits.Rule{Type: "two", Concurrency: 2})
	ctx := streamstest.Context(t)
	a := newLimiter(t, e, "a", 5*time.Second)
	defer a.Close()
	b := newLimiter(t, e, "b", 5*time.Second)
	defer b.Close()
	leases, err := e.JS.Stream(ctx, "KV_"+e.Names.LeasesBucket())
	if err != nil {
		t.Fatal(err)
	}
	writes := func() uint64 {
		t.Helper()
		info, err := leases.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return info.State.LastSeq
	}
	before := writes()
	const n = 20
	for i := range n {
		lease, err := a.AcquireWaiting(ctx, "two", "", fmt.Sprint("t", i), nil, 5*time.Second)
		if err != nil || lease == nil {
			t.Fatalf("task %d: lease %v, %v", i, lease, err)
		}
		lease.Release(ctx)
	}
	if w := writes() - before; w > 4 {
		t.Errorf("%d lease writes for %d tasks one after the other, want at most 4 (the two slots taken and freed)", w, n)
	}
	// The slots a left idle are freed: b takes both.
	var got []*flow.Lease
	streamstest.WaitFor(t, 5*time.Second, func() error {
		lease, err := b.Acquire(ctx, "two", "", fmt.Sprint("b", len(got)))
		if err != nil {
			return err
		}
		got = append(got, lease)
		if len(got) < 2 {
			return errors.New("one slot of two taken")
		}
		return nil
	})
	var denied *flow.DeniedError
	if _, err := a.Acquire(ctx, "two", "", "over"); !errors.As(err, &denied) {
		t.Errorf("a third task while b holds both slots: %v, want a DeniedError", err)
	}
	for _, l := range got {
		l.Release(ctx)
	}
}

// Keyed tasks take and free their key's slots without every other worker
// hearing of it: a worker follows the type-wide slots only.
func TestKeySlotChangesStayWithTheirWorker(t *testing.T) {
	t.Parallel()
	e := streamstest.Start(t, streams.Settings{})
	putRule(t, e, limits.Rule{Type: "keyed", KeyConcurrency: 1})
	ctx := streamstest.Context(t)
	nc := e.Connect(t)
	other, err := flow.New(ctx, flow.Config{
		JS: e.JS, Conn: nc, Names: e.Names, Owner: "other", TTL: 5 * time.Second,
		IOTimeout: 5 * time.Second, Logger: streamstest.Logger(t),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	a := newLimiter(t, e, "a", 5*time.Second)
	before := nc.Stats().InMsgs
	const n = 50
	for i := range n {
		lease, err := a.Acquire(ctx, "keyed", fmt.Sprint("k", i), fmt.Sprint("t", i))
		if err != nil || lease == nil {
			t.Fatalf("task %d: lease %v, %v", i, lease, err)
		}
		lease.Release(ctx)
	}
	a.Close() // waits for the slots' deletes
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	if got := nc.Stats().InMsgs - before; got > 0 {
		t.Errorf("another worker received %d messages while %d keyed tasks took and freed their slots, want none", got, n)
	}
}
