package producer

import (
	"testing"
	"time"

	"github.com/spoolq/spool/streams"
	"github.com/spoolq/spool/streams/admin"
)

// BenchmarkServedCheck is what the check of a task's type adds to an
// enqueue once a reading holds: the refresh test and the warning lookup.
func BenchmarkServedCheck(b *testing.B) {
	s := &served{adm: &admin.Client{}}
	s.due.Store(time.Now().Add(time.Hour).UnixNano())
	s.snap.Store(&servedSnap{serving: admin.Serving{Consumers: streams.ConsumersByType, Patterns: []string{"a.*", "b.>", "c"}}})
	ctx, now := b.Context(), time.Now()
	for b.Loop() {
		s.refresh(ctx, now)
		if s.warning("d.x") == "" {
			b.Fatal("no warning")
		}
	}
}
