package checker_test

import (
	"encoding/json"
	"slices"
	"testing"

	"github.com/spoolq/spool/streams"
	"github.com/spoolq/spool/streams/embedded"
	"github.com/spoolq/spool/streams/streamstest"
	"github.com/spoolq/spool/tests/checker"
)

// LoadResultsAtLeader reads, at the bucket's leader, the documents of the
// tasks a watch found none for: a stored one is fed to the checker, a
// deleted or absent one stays unresolved.
func TestLoadResultsAtLeader(t *testing.T) {
	t.Parallel()
	e := streamstest.StartWith(t, embedded.Options{}, streams.Settings{})
	ctx := streamstest.Context(t)
	kv, err := e.JS.KeyValue(ctx, e.Names.ResultsBucket())
	if err != nil {
		t.Fatal(err)
	}
	put := func(id string) {
		b, err := json.Marshal(completed(id, "v-"+id))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := kv.Put(ctx, id, b); err != nil {
			t.Fatal(err)
		}
	}
	put("stored")
	put("deleted")
	if err := kv.Delete(ctx, "deleted"); err != nil {
		t.Fatal(err)
	}
	c := checker.New()
	for _, id := range []string{"stored", "deleted", "absent"} {
		c.Enqueued(id, "v-"+id)
		c.Executed(id, checker.Execution{Value: "v-" + id, Worker: "w"})
	}
	if got := c.Unresolved(); !slices.Equal(got, []string{"absent", "deleted", "stored"}) {
		t.Fatalf("unresolved before: %v", got)
	}
	n, err := checker.LoadResultsAtLeader(ctx, e.JS, e.Names, c, c.Unresolved())
	if err != nil {
		t.Fatal(err)
	}
	if n != 1 {
		t.Errorf("read %d documents at the leader, want 1", n)
	}
	if got := c.Unresolved(); !slices.Equal(got, []string{"absent", "deleted"}) {
		t.Errorf("unresolved after: %v", got)
	}
	r := c.Check()
	if r.Completed != 1 || len(r.Lost) != 2 {
		t.Errorf("completed %d, lost %v; want 1 completed, 2 lost", r.Completed, r.Lost)
	}
}
