package flow_test

import (
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/spoolq/spool/consumer/flow"
	"github.com/spoolq/spool/shared/limits"
	"github.com/spoolq/spool/streams"
	"github.com/spoolq/spool/streams/streamstest"
)

// A keyed task costs two writes of the leases bucket, its slot's create
// and its delete, and nothing else on the server: every further request
// per keyed task would lower the throughput of a per-key limit. A key
// another worker freed costs one read more (its delete marker's
// revision), and a key held elsewhere a failed write and that read.
func TestKeyedTaskWrites(t *testing.T) {
	t.Parallel()
	e := streamstest.Start(t, streams.Settings{})
	putRule(t, e, limits.Rule{Type: "keyed", KeyConcurrency: 1})
	ctx := streamstest.Context(t)
	var writes, reads atomic.Int64
	count := func(n *atomic.Int64) nats.MsgHandler { return func(*nats.Msg) { n.Add(1) } }
	ws, err := e.NC.Subscribe("$KV."+e.Names.LeasesBucket()+".kc.>", count(&writes))
	if err != nil {
		t.Fatal(err)
	}
	defer ws.Unsubscribe()
	rs, err := e.NC.Subscribe("$JS.API.DIRECT.GET.>", count(&reads))
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Unsubscribe()
	a := newLimiter(t, e, "a", time.Minute)
	defer a.Close()
	b := newLimiter(t, e, "b", time.Minute)
	defer b.Close()
	// settled waits until the counts reach w writes and r reads, and holds
	// them there past a flush (a request more would show).
	settled := func(step string, w, r int64) {
		t.Helper()
		streamstest.WaitFor(t, 10*time.Second, func() error {
			if err := e.NC.Flush(); err != nil {
				return err
			}
			if writes.Load() != w || reads.Load() != r {
				return fmt.Errorf("%s: %d writes and %d reads, want %d and %d", step, writes.Load(), reads.Load(), w, r)
			}
			return nil
		})
		writes.Store(0)
		reads.Store(0)
	}
	const n = 10
	for i := range n {
		lease, err := a.Acquire(ctx, "keyed", fmt.Sprint("k", i), fmt.Sprint("t", i))
		if err != nil || lease == nil {
			t.Fatalf("task %d: lease %v, %v", i, lease, err)
		}
		lease.Release(ctx)
	}
	a.Close() // waits for the deletes
	settled("fresh keys", 2*n, 0)
	for i := range n {
		lease, err := b.Acquire(ctx, "keyed", fmt.Sprint("k", i), fmt.Sprint("u", i))
		if err != nil || lease == nil {
			t.Fatalf("key freed elsewhere %d: lease %v, %v", i, lease, err)
		}
		defer lease.Release(ctx)
	}
	// The failed create, the read of the marker, the create at its revision.
	settled("keys another worker freed", 2*n, n)
	c := newLimiter(t, e, "c", time.Minute)
	defer c.Close()
	for i := range n {
		_, err := c.Acquire(ctx, "keyed", fmt.Sprint("k", i), fmt.Sprint("v", i))
		var d *flow.DeniedError
		if !errors.As(err, &d) || d.Limit != "key_concurrency" {
			t.Fatalf("held key %d: %v, want the key's limit full", i, err)
		}
	}
	settled("keys held elsewhere", n, n)
}
