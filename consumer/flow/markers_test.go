package flow_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/spoolq/spool/shared/limits"
	"github.com/spoolq/spool/streams"
	"github.com/spoolq/spool/streams/streamstest"
)

// A freed per-key slot leaves nothing in the leases bucket for good: its
// delete marker expires with the slot TTL, and the marker the server
// writes in its place carries a TTL of its own. Without it every key ever
// limited would keep a marker forever.
func TestFreedKeySlotsLeaveNothingBehind(t *testing.T) {
	t.Parallel()
	e := streamstest.Start(t, streams.Settings{})
	putRule(t, e, limits.Rule{Type: "keyed", KeyConcurrency: 1})
	ctx := streamstest.Context(t)
	l := newLimiter(t, e, "a", time.Second)
	const n = 20
	for i := range n {
		lease, err := l.Acquire(ctx, "keyed", fmt.Sprint("k", i), fmt.Sprint("t", i))
		if err != nil || lease == nil {
			t.Fatalf("task %d: lease %v, %v", i, lease, err)
		}
		lease.Release(ctx)
	}
	l.Close() // waits for the slots' deletes
	st, err := e.JS.Stream(ctx, "KV_"+e.Names.LeasesBucket())
	if err != nil {
		t.Fatal(err)
	}
	subj := "$KV." + e.Names.LeasesBucket() + "."
	streamstest.WaitFor(t, 15*time.Second, func() error {
		for i := range n {
			m, err := st.GetLastMsgForSubject(ctx, subj+limits.SlotKey("keyed", fmt.Sprint("k", i), 0))
			if errors.Is(err, jetstream.ErrMsgNotFound) {
				continue // gone
			}
			if err != nil {
				return err
			}
			if m.Header.Get(jetstream.MarkerReasonHeader) == "" || m.Header.Get(jetstream.MsgTTLHeader) == "" {
				return fmt.Errorf("key k%d: last entry %v, want none or a server marker with a TTL", i, m.Header)
			}
		}
		return nil
	})
}
