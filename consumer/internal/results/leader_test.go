package results_test

import (
	"testing"
	"time"

	"github.com/spoolq/spool/consumer/internal/results"
	spool "github.com/spoolq/spool/shared"
	"github.com/spoolq/spool/streams"
	"github.com/spoolq/spool/streams/streamstest"
)

// GetFromLeader reads what Put stored, through the JetStream API rather
// than a direct get, and tells a missing document apart.
func TestGetFromLeader(t *testing.T) {
	t.Parallel()
	_, s := newStore(t)
	ctx := streamstest.Context(t)
	if _, found, err := s.GetFromLeader(ctx, "missing"); err != nil || found {
		t.Fatalf("missing document: found %v, err %v", found, err)
	}
	enq := time.Unix(0, 1_795_597_200_123_456_789)
	want := spool.Result{ID: "t1", Type: "a", Priority: spool.High, State: spool.StateCompleted, Attempts: 2,
		Result: []byte(`{"ok":true}`), EnqueuedAt: enq}
	if err := s.Put(ctx, want); err != nil {
		t.Fatal(err)
	}
	got, found, err := s.GetFromLeader(ctx, "t1")
	if err != nil || !found {
		t.Fatalf("stored document: found %v, err %v", found, err)
	}
	if got.State != want.State || got.Attempts != 2 || string(got.Result) != `{"ok":true}` || !got.EnqueuedAt.Equal(enq) || got.Worker != "w1" {
		t.Fatalf("read %+v, want %+v", got, want)
	}
}

// PutAt writes only over the revision given: 0 creates, a stale revision
// is a conflict, and ReadFromLeader returns the revision to write over.
func TestPutAtRevision(t *testing.T) {
	t.Parallel()
	ctx := streamstest.Context(t)
	_, s := newStore(t)
	doc := spool.Result{ID: "t2", Type: "a", Priority: spool.High, State: spool.StateProcessing, Attempts: 1}
	if _, rev, found, err := s.ReadFromLeader(ctx, "t2"); err != nil || found || rev != 0 {
		t.Fatalf("missing document: rev %d, found %v, err %v", rev, found, err)
	}
	if err := s.PutAt(ctx, doc, 0); err != nil {
		t.Fatalf("create over revision 0: %v", err)
	}
	if err := s.PutAt(ctx, doc, 0); !results.IsConflict(err) {
		t.Fatalf("second create over revision 0: %v, want a conflict", err)
	}
	_, rev, found, err := s.ReadFromLeader(ctx, "t2")
	if err != nil || !found || rev == 0 {
		t.Fatalf("stored document: rev %d, found %v, err %v", rev, found, err)
	}
	doc.State = spool.StateCompleted
	if err := s.PutAt(ctx, doc, rev+1); !results.IsConflict(err) {
		t.Fatalf("write over a wrong revision: %v, want a conflict", err)
	}
	if err := s.PutAt(ctx, doc, rev); err != nil {
		t.Fatalf("write over the revision read: %v", err)
	}
	got, found, err := s.GetFromLeader(ctx, "t2")
	if err != nil || !found || got.State != spool.StateCompleted {
		t.Fatalf("after the update: %+v, found %v, err %v", got, found, err)
	}
}

// newStore starts a server with the topology and opens a Store of worker
// w1 on it.
func newStore(t *testing.T) (*streamstest.Env, *results.Store) {
	t.Helper()
	e := streamstest.Start(t, streams.Settings{})
	s, err := results.New(streamstest.Context(t), e.JS, e.Names, "w1")
	if err != nil {
		t.Fatal(err)
	}
	return e, s
}
