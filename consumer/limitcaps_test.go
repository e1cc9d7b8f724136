package consumer_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/spoolq/spool/consumer"
	spool "github.com/spoolq/spool/shared"
	"github.com/spoolq/spool/shared/limits"
	"github.com/spoolq/spool/streams/streamstest"
)

// maxAckPending reads the MaxAckPending of the type consumer of p and
// pattern.
func (e *env) maxAckPending(p spool.Priority, pattern string) (int, error) {
	c, err := e.js.Consumer(testCtx(e.t), e.names.TaskStream(), e.names.TypeConsumer(p, pattern))
	if err != nil {
		return 0, err
	}
	return c.CachedInfo().Config.MaxAckPending, nil
}

// Where workers pull by type, the consumers of a type with a concurrency
// limit carry the limit as MaxAckPending, on every priority, and follow
// the rule as it changes: raised, lifted, set again. A type served
// through a wildcard pattern keeps the template's cap.
func TestPullByTypeConsumerCarriesConcurrencyLimit(t *testing.T) {
	t.Parallel()
	e := byTypeEnv(t)
	e.putRule(limits.Rule{Type: "capped.one", Concurrency: 3})
	e.putRule(limits.Rule{Type: "wild.one", Concurrency: 2})
	noop := consumer.HandlerFunc(func(context.Context, *consumer.Task) ([]byte, error) { return nil, nil })
	e.worker(noop, consumer.WithTypes("capped.one", "wild.*"))
	base := e.topo.Settings.MaxAckPending
	want := func(pattern string, n int) {
		t.Helper()
		streamstest.WaitFor(t, 10*time.Second, func() error {
			for _, p := range spool.Priorities {
				got, err := e.maxAckPending(p, pattern)
				if err != nil {
					return err
				}
				if got != n {
					return fmt.Errorf("%s consumer of %s: MaxAckPending %d, want %d", p, pattern, got, n)
				}
			}
			return nil
		})
	}
	want("capped.one", 3)
	want("wild.*", base)
	e.putRule(limits.Rule{Type: "capped.one", Concurrency: 7})
	want("capped.one", 7)
	st, err := limits.Open(testCtx(t), e.js, e.names)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Delete(testCtx(t), "capped.one"); err != nil {
		t.Fatal(err)
	}
	want("capped.one", base)
	// A pattern rule governs the exact type too.
	e.putRule(limits.Rule{Type: "capped.*", Concurrency: 4})
	want("capped.one", 4)
}

// A backlog of a type whose concurrency limit is full, pulled by type: the
// server holds the limit, so no task is turned away (none handed back nor
// parked in the waiting room), and the limit holds throughout. A slot
// passes from one task of the worker to its next without a write to the
// leases bucket, so the limit costs a few writes in all, not two or more
// per task.
func TestPullByTypeFullLimitNoHandBack(t *testing.T) {
	t.Parallel()
	e := byTypeEnv(t)
	e.putRule(limits.Rule{Type: "capped", Concurrency: 4})
	const n = 300
	var running gauge
	mux := consumer.NewMux()
	mux.HandleFunc("capped", func(ctx context.Context, task *consumer.Task) ([]byte, error) {
		running.enter()
		defer running.leave()
		time.Sleep(time.Millisecond) // a short handler: the limit stays full
		return nil, nil
	})
	e.publishMany(spool.Normal, "capped", n, nil)
	before := e.leaseWrites()
	w := e.worker(mux, consumer.WithConcurrency(40, 40))
	streamstest.WaitFor(t, 2*time.Minute, func() error {
		if c := w.Stats().Types["capped"].Completed; c < n {
			return fmt.Errorf("%d of %d limited tasks completed", c, n)
		}
		return nil
	})
	writes := e.leaseWrites() - before
	t.Logf("%d lease writes for %d tasks", writes, n)
	// Slots left idle while a loaded machine delays the next delivery
	// are freed and taken again: a margin for those.
	if writes > n/4 {
		t.Errorf("%d lease writes for %d tasks of a full limit, want at most %d", writes, n, n/4)
	}
	fs := w.Stats().Flow["capped"]
	var denied uint64
	for _, d := range fs.Denied {
		denied += d
	}
	if denied != 0 || fs.Parked["concurrency"] != 0 {
		t.Errorf("%d tasks turned away (%v), %d parked: the server's cap should hold them back", denied, fs.Denied, fs.Parked["concurrency"])
	}
	if p := running.peak.Load(); p > 4 {
		t.Errorf("%d limited tasks ran at once, limit 4", p)
	}
	if fs.Acquired < n {
		t.Errorf("%d leases taken for %d tasks", fs.Acquired, n)
	}
}

// leaseWrites is the number of writes the leases bucket has stored so
// far (its stream's last sequence).
func (e *env) leaseWrites() uint64 {
	e.t.Helper()
	s, err := e.js.Stream(testCtx(e.t), "KV_"+e.names.LeasesBucket())
	if err != nil {
		e.t.Fatal(err)
	}
	return s.CachedInfo().State.LastSeq
}
