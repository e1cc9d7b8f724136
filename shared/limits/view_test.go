package limits

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	spool "github.com/spoolq/spool/shared"
	"github.com/spoolq/spool/shared/internal/jstest"
)

// rulesBucket starts an embedded JetStream server owned by t and creates
// the rules bucket of names in it, as provisioning does.
func rulesBucket(t *testing.T, names spool.Names) (jetstream.JetStream, jetstream.KeyValue) {
	t.Helper()
	_, _, js := jstest.Start(t)
	kv, err := js.CreateKeyValue(t.Context(), jetstream.KeyValueConfig{Bucket: names.LimitsBucket(), History: 1})
	if err != nil {
		t.Fatal(err)
	}
	return js, kv
}

// putRule stores rule typ with limit n and returns its entry.
func putRule(t *testing.T, kv jetstream.KeyValue, typ string, n int) jetstream.KeyValueEntry {
	t.Helper()
	data, err := jsonMarshal(Rule{Type: typ, Concurrency: n})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(t.Context(), RuleKey(typ), data); err != nil {
		t.Fatal(err)
	}
	e, err := kv.Get(t.Context(), RuleKey(typ))
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// A watch served by a replica still catching up ends its initial values
// early: the load goes on until it has seen the leader's last revision.
// The updates here are the bucket's real entries, fed as such a replica
// would: rule a, the end of the initial values, and rule b only later.
func TestViewLoadWaitsForTheLeadersRevision(t *testing.T) {
	t.Parallel()
	_, kv := rulesBucket(t, spool.DefaultNames())
	a, b := putRule(t, kv, "a", 1), putRule(t, kv, "b", 2)
	updates := make(chan jetstream.KeyValueEntry)
	v := &View{}
	var asked int
	loaded := make(chan error, 1)
	go func() {
		loaded <- v.load(t.Context(), updates, b.Revision(), func(context.Context) (bool, error) {
			asked++
			return false, nil // revision b is at the leader
		}, func(string, *Rule, error) {})
	}()
	updates <- a
	updates <- nil
	select {
	case updates <- b:
	case err := <-loaded:
		t.Fatalf("the load ended (%v) before it saw revision %d", err, b.Revision())
	}
	if err := <-loaded; err != nil {
		t.Fatal(err)
	}
	if asked != 1 {
		t.Errorf("the leader was asked %d times whether the last revision is gone, want 1", asked)
	}
	if r, ok := v.Rule("b"); !ok || r.Concurrency != 2 {
		t.Errorf("rule b: %+v, %v", r, ok)
	}
	if r, ok := v.Rule("a"); !ok || r.Concurrency != 1 {
		t.Errorf("rule a: %+v, %v", r, ok)
	}
}

// When the leader's last revision is gone (a compacted delete marker), no
// watch shows it: Watch settles for what the bucket holds instead of
// waiting until its context ends.
func TestWatchAfterTheLastRevisionWasCompacted(t *testing.T) {
	t.Parallel()
	names := spool.DefaultNames()
	js, kv := rulesBucket(t, names)
	putRule(t, kv, "a", 3)
	putRule(t, kv, "b", 1)
	if err := kv.Delete(t.Context(), RuleKey("b")); err != nil {
		t.Fatal(err)
	}
	s, err := js.Stream(t.Context(), "KV_"+names.LimitsBucket())
	if err != nil {
		t.Fatal(err)
	}
	// What `nats kv compact` does to an old delete marker.
	if err := s.Purge(t.Context(), jetstream.WithPurgeSubject("$KV."+names.LimitsBucket()+"."+RuleKey("b"))); err != nil {
		t.Fatal(err)
	}
	if st := s.CachedInfo().State; st.Msgs == 0 {
		t.Fatalf("stream state %+v: rule a should remain", st)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	v, err := Watch(ctx, js, names, nil)
	if errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Watch waited for a revision no watch shows: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer v.Stop()
	if r, ok := v.Rule("a"); !ok || r.Concurrency != 3 {
		t.Errorf("rule a: %+v, %v", r, ok)
	}
	if _, ok := v.Rule("b"); ok {
		t.Error("the deleted rule b is in force")
	}
}
