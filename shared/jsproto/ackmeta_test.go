package jsproto_test

import (
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/spoolq/spool/shared/jsproto"
)

// ParseAckSubject reads what nats.go reads from both forms of the ack
// subject, and refuses what nats.go refuses.
func TestParseAckSubject(t *testing.T) {
	t.Parallel()
	valid := []string{
		"$JS.ACK.SPOOL_TASKS.spool-normal.3.41.17.1795316429644390470.12",
		"$JS.ACK._.ABCHASH.SPOOL_TASKS.spool-high.1.2.3.1795316429644390470.0.rand",
		"$JS.ACK.hub.ABCHASH.SPOOL_TASKS.spool-high.1.2.3.1795316429644390470.0",
		"$JS.ACK.hub.ABCHASH.SPOOL_TASKS.spool-high.1.2.3.1795316429644390470.0.rand.more",
	}
	for _, s := range valid {
		got, err := jsproto.ParseAckSubject(s)
		if err != nil {
			t.Errorf("%s: %v", s, err)
			continue
		}
		want, err := (&nats.Msg{Reply: s, Sub: &nats.Subscription{}}).Metadata()
		if err != nil {
			t.Fatalf("nats.go refuses %s: %v", s, err)
		}
		if got.Stream != want.Stream || got.Consumer != want.Consumer || got.Domain != want.Domain ||
			got.NumDelivered != want.NumDelivered || got.NumPending != want.NumPending ||
			got.Sequence.Stream != want.Sequence.Stream || got.Sequence.Consumer != want.Sequence.Consumer ||
			!got.Timestamp.Equal(want.Timestamp) {
			t.Errorf("%s: got %+v, nats.go reads %+v", s, got, want)
		}
	}
	if md, _ := jsproto.ParseAckSubject(valid[0]); md.Sequence.Stream != 41 || md.NumDelivered != 3 || md.NumPending != 12 ||
		!md.Timestamp.Equal(time.Unix(0, 1795316429644390470)) {
		t.Errorf("v1 fields %+v", md)
	}
	for _, s := range []string{
		"",
		"_INBOX.abc",
		"$JS.ACK.SPOOL_TASKS.spool-normal.3.41.17.1795316429644390470",         // 8 tokens
		"$JS.ACK.hub.ABCHASH.SPOOL_TASKS.spool-high.1.2.3.1795316429644390470", // 10 tokens
	} {
		if _, err := jsproto.ParseAckSubject(s); !errors.Is(err, jetstream.ErrNotJSMessage) {
			t.Errorf("%q: err %v, want ErrNotJSMessage", s, err)
		}
	}
}
