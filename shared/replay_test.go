package spool_test

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	spool "github.com/spoolq/spool/shared"
)

func TestReplayOf(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 11, 22, 1, 2, 3, 4, time.UTC)
	h := nats.Header{}
	if n, when := spool.ReplayOf(h); n != 0 || when != nil {
		t.Errorf("no headers: %d %v", n, when)
	}
	h.Set(spool.HeaderReplays, "2")
	h.Set(spool.HeaderReplayedAt, at.Format(time.RFC3339Nano))
	if n, when := spool.ReplayOf(h); n != 2 || when == nil || !when.Equal(at) {
		t.Errorf("replayed twice: %d %v", n, when)
	}
	h.Set(spool.HeaderReplayedAt, "yesterday")
	if n, when := spool.ReplayOf(h); n != 2 || when != nil {
		t.Errorf("bad time: %d %v", n, when)
	}
	h.Set(spool.HeaderReplays, "-1")
	if n, _ := spool.ReplayOf(h); n != 0 {
		t.Errorf("negative count: %d", n)
	}
}
