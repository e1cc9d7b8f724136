package consumer_test

import (
	"context"
	"fmt"
	"slices"
	"strconv"
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

// An ordered rule stored under a pattern orders the keys of every type it
// matches: the tasks of a key of ledger.post and of ledger.void run one
// at a time in enqueue order across two workers.
func TestOrderedKeysThroughPattern(t *testing.T) {
	t.Parallel()
	e, turns := newTurnsEnv(t, limits.Rule{Type: "ledger.*", Ordered: limits.OrderHold})
	log := newOrderLog()
	h := consumer.HandlerFunc(func(ctx context.Context, task *consumer.Task) ([]byte, error) {
		key := task.Type + "/" + task.Headers.Get(spool.HeaderKey)
		i, _ := strconv.Atoi(string(task.Payload))
		log.start(key, i)
		log.end(key, i, true)
		return nil, nil
	})
	for i := range 2 {
		e.worker(h, consumer.WithConcurrency(5, 5), consumer.WithWorkerName(fmt.Sprintf("w%d", i)))
	}
	const per = 10
	types := []string{"ledger.post", "ledger.void"}
	for i := range per {
		for _, typ := range types {
			for _, key := range []string{"a", "b"} {
				e.parkOrdered(turns, typ, key, fmt.Sprintf("%s-%s-%d", strings.ReplaceAll(typ, ".", "_"), key, i), []byte(strconv.Itoa(i)))
			}
		}
	}
	for i := range per {
		for _, typ := range types {
			for _, key := range []string{"a", "b"} {
				e.waitResult(fmt.Sprintf("%s-%s-%d", strings.ReplaceAll(typ, ".", "_"), key, i), spool.StateCompleted, time.Minute)
			}
		}
	}
	log.mu.Lock()
	defer log.mu.Unlock()
	if len(log.overlap) > 0 {
		t.Errorf("tasks of one key ran at once: %v", log.overlap)
	}
	want := make([]int, per)
	for i := range want {
		want[i] = i
	}
	for key, got := range log.finished {
		if !slices.Equal(got, want) {
			t.Errorf("key %s completed in order %v, want %v", key, got, want)
		}
	}
	if len(log.finished) != 4 {
		t.Errorf("%d keys ran, want 4", len(log.finished))
	}
}
