package consumer_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/spoolq/spool/consumer"
	spool "github.com/spoolq/spool/shared"
	"github.com/spoolq/spool/shared/limits"
	"github.com/spoolq/spool/streams"
	"github.com/spoolq/spool/streams/streamstest"
)

// A pattern rule limits each type it matches on its own (mail.a and
// mail.b run 2 at once each under mail.*), an exact rule overrides it for
// a third type (mail.bulk runs 1 at once), and key patterns inside a rule
// give some keys other per-key limits (vip-* keys run 3 at once, other
// keys 1). Every handler blocks until each group has reached its limit
// at once, so the peaks are exactly the limits.
func TestPatternRules(t *testing.T) {
	t.Parallel()
	e := newEnv(t, streams.Settings{})
	e.putRule(limits.Rule{Type: "mail.*", Concurrency: 2})
	e.putRule(limits.Rule{Type: "mail.bulk", Concurrency: 1})
	e.putRule(limits.Rule{Type: "keyed.>", KeyConcurrency: 1, Keys: map[string]limits.KeyLimit{"vip-*": {Concurrency: 3}}})
	want := map[string]int64{"mail.a": 2, "mail.b": 2, "mail.bulk": 1, "keyed.x/std": 1, "keyed.x/vip-1": 3}
	var mu sync.Mutex
	groups := map[string]*gauge{}
	for g := range want {
		groups[g] = new(gauge)
	}
	release := make(chan struct{})
	h := consumer.HandlerFunc(func(ctx context.Context, task *consumer.Task) ([]byte, error) {
		g := task.Type
		if k := task.Headers.Get(spool.HeaderKey); k != "" {
			g += "/" + k
		}
		mu.Lock()
		gg := groups[g]
		mu.Unlock()
		gg.enter()
		defer gg.leave()
		select {
		case <-release:
		case <-ctx.Done():
		}
		return nil, nil
	})
	e.worker(h, consumer.WithConcurrency(30, 30))
	var ids []string
	for g := range want {
		typ, key, _ := strings.Cut(g, "/")
		for i := range 5 {
			id := strings.NewReplacer(".", "_", "/", "_").Replace(fmt.Sprintf("%s-%s-%d", g, key, i))
			hdr := nats.Header{}
			hdr.Set(spool.HeaderTaskID, id)
			if key != "" {
				hdr.Set(spool.HeaderKey, key)
			}
			e.publish(spool.Normal, typ, nil, hdr)
			ids = append(ids, id)
		}
	}
	streamstest.WaitFor(t, 30*time.Second, func() error {
		for g, n := range want {
			if now := groups[g].now.Load(); now != n {
				return fmt.Errorf("%s: %d running, want %d", g, now, n)
			}
		}
		return nil
	})
	close(release)
	for _, id := range ids {
		e.waitResult(id, spool.StateCompleted, 60*time.Second)
	}
	for g, n := range want {
		if p := groups[g].peak.Load(); p != n {
			t.Errorf("%s: peak %d running at once, want its limit %d", g, p, n)
		}
	}
}
