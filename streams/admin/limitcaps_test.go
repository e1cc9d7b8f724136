package admin_test

import (
	"testing"

	spool "github.com/spoolq/spool/shared"
	"github.com/spoolq/spool/shared/limits"
	"github.com/spoolq/spool/streams"
	"github.com/spoolq/spool/streams/streamstest"
)

// Where workers pull by type, SetLimit and DeleteLimit set the
// MaxAckPending of the exact type's consumers to its concurrency limit
// and back to the template's at once, without a worker; a wildcard
// consumer keeps the template's.
func TestByTypeLimitCapsConsumers(t *testing.T) {
	t.Parallel()
	e := streamstest.Start(t, streams.Settings{Consumers: streams.ConsumersByType})
	c := newClient(t, e)
	ctx := streamstest.Context(t)
	tasks := e.Stream(t, e.Names.TaskStream())
	for _, pattern := range []string{"cap.one", "cap.*.x"} {
		cfg := streams.TypeConsumerConfig(e.Names, tasks.CachedInfo().Config, spool.High, pattern)
		if _, err := tasks.CreateConsumer(ctx, cfg); err != nil {
			t.Fatal(err)
		}
	}
	base := streams.TypeConsumerConfig(e.Names, tasks.CachedInfo().Config, spool.High, "cap.one").MaxAckPending
	check := func(pattern string, want int) {
		t.Helper()
		cons, err := tasks.Consumer(ctx, e.Names.TypeConsumer(spool.High, pattern))
		if err != nil {
			t.Fatal(err)
		}
		if got := cons.CachedInfo().Config.MaxAckPending; got != want {
			t.Errorf("consumer of %s: MaxAckPending %d, want %d", pattern, got, want)
		}
	}
	if err := c.SetLimit(ctx, limits.Rule{Type: "cap.one", Concurrency: 6}); err != nil {
		t.Fatal(err)
	}
	if err := c.SetLimit(ctx, limits.Rule{Type: "cap.*.x", Concurrency: 2}); err != nil {
		t.Fatal(err)
	}
	check("cap.one", 6)
	check("cap.*.x", base)
	if err := c.DeleteLimit(ctx, "cap.one"); err != nil {
		t.Fatal(err)
	}
	check("cap.one", base)
}
