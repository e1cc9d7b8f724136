package consumer_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/spoolq/spool/consumer"
	spool "github.com/spoolq/spool/shared"
	"github.com/spoolq/spool/streams"
	"github.com/spoolq/spool/streams/embedded"
	"github.com/spoolq/spool/streams/streamstest"
)

// wireCounts counts the messages on the wire by what they are, as a core
// subscription on ">" sees them.
type wireCounts struct {
	mu        sync.Mutex
	n         map[string]int
	completed int
}

func (w *wireCounts) add(m *nats.Msg) {
	class := wireClass(m)
	w.mu.Lock()
	defer w.mu.Unlock()
	w.n[class]++
	if class == "event completed" {
		w.completed++
	}
}

func (w *wireCounts) snapshot() (map[string]int, int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return maps.Clone(w.n), w.completed
}

// wireClass names what a message is.
func wireClass(m *nats.Msg) string {
	s := m.Subject
	switch {
	case strings.HasPrefix(s, "$JS.API.CONSUMER.MSG.NEXT."):
		return "pull request"
	case strings.HasPrefix(s, "$JS.ACK."):
		return "ack " + string(m.Data)
	case strings.HasPrefix(s, "$JS.API."):
		return "JetStream request " + strings.Join(strings.Split(s, ".")[2:4], ".")
	case strings.HasPrefix(s, "$KV."):
		return "write " + strings.Split(s, ".")[1]
	case strings.HasPrefix(s, "spool.events."):
		return "event " + strings.Split(s, ".")[2]
	case strings.HasPrefix(s, "_INBOX."):
		return "inbox"
	}
	return "other " + s
}

// A plain task (no limit, no ordered or unique key, no workflow, no pause,
// no cancellation) costs the worker its result write, its ack and its two
// events, and its share of a pull request: no other message. A request
// added to the path of every attempt (a read, a check, an ack waiting for
// its confirmation) fails this test.
func TestPlainTaskWire(t *testing.T) {
	for _, mode := range []string{streams.ConsumersByPriority, streams.ConsumersByType} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, streams.Settings{Consumers: mode})
			mux := consumer.NewMux()
			mux.HandleFunc("plain", func(context.Context, *consumer.Task) ([]byte, error) { return []byte(`1`), nil })
			e.worker(mux, consumer.WithConcurrency(10, 10), consumer.WithPolling(time.Second, time.Minute))
			counts := &wireCounts{n: map[string]int{}}
			spy := e.connect()
			sub, err := spy.Subscribe(">", counts.add)
			if err != nil {
				t.Fatal(err)
			}
			if err := sub.SetPendingLimits(-1, -1); err != nil {
				t.Fatal(err)
			}
			if err := spy.Flush(); err != nil {
				t.Fatal(err)
			}
			const n = 200
			e.publishMany(spool.Normal, "plain", n, nil)
			streamstest.WaitFor(t, 30*time.Second, func() error {
				if _, c := counts.snapshot(); c < n {
					return fmt.Errorf("%d of %d completed events", c, n)
				}
				return nil
			})
			got, _ := counts.snapshot()
			for _, k := range slices.Sorted(maps.Keys(got)) {
				t.Logf("%-32s %5d  %.2f per task", k, got[k], float64(got[k])/n)
			}
			// What the promise needs of a plain task: its result write, its
			// ack and its two events. Pull requests are shared by the tasks
			// they deliver, and the worker's other JetStream requests come
			// with time, not with tasks (the backlog read of the refresh).
			// The enqueues, their deliveries, the replies to inboxes and the
			// server's advisories are not the worker's.
			perTask := map[string]int{"ack +ACK": 1, "write spool_results": 1, "event started": 1, "event completed": 1}
			var requests int
			for k, v := range got {
				switch {
				case perTask[k] > 0:
					if v != perTask[k]*n {
						t.Errorf("%d messages %q for %d plain tasks, want %d", v, k, n, perTask[k]*n)
					}
				case strings.HasPrefix(k, "JetStream request "):
					requests += v
				case k == "pull request", k == "inbox", k == "other spool.tasks.normal.plain",
					strings.HasPrefix(k, "other $JS.EVENT."):
				default:
					t.Errorf("%d messages %q for %d plain tasks, want none", v, k, n)
				}
			}
			if requests > 5 {
				t.Errorf("%d JetStream requests besides pulls for %d plain tasks, want at most 5", requests, n)
			}
			// Replies to inboxes are the deliveries and the result
			// writes' acknowledgements, two per task, plus the status
			// replies to pull requests (heartbeats, expiries), which come
			// with time on a slow machine: an ack that asks for a
			// confirmation, or any request added per task, adds one per task.
			if r, most := got["inbox"], 2*n+n/4; r > most {
				t.Errorf("%d replies to inboxes for %d plain tasks, want at most %d", r, n, most)
			}
			if p := got["pull request"]; p > n/2 {
				t.Errorf("%d pull requests for %d tasks, want at most %d", p, n, n/2)
			}
		})
	}
}

// The server's own count of the messages a worker sends for plain tasks:
// per task its result write, its ack and, with events on, its two events,
// plus a small share of pull requests. Where TestPlainTaskWire names each
// message as a subscriber sees it, this counts what the server receives,
// whatever its subject, so a read, a check or a write added to the path of
// every attempt fails it.
func TestPlainTaskServerMessages(t *testing.T) {
	for _, c := range []struct {
		mode   string
		events bool
	}{{streams.ConsumersByType, true}, {streams.ConsumersByType, false}, {streams.ConsumersByPriority, true}} {
		mode, events := c.mode, c.events
		t.Run(fmt.Sprintf("%s/events=%t", mode, events), func(t *testing.T) {
			t.Parallel()
			srv, err := embedded.Start(embedded.Options{StoreDir: t.TempDir()})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { srv.Shutdown(); srv.WaitForShutdown() })
			e := provisionEnv(t, srv.ClientURL(), streams.Settings{Consumers: mode})
			mux := consumer.NewMux()
			mux.HandleFunc("plain", func(context.Context, *consumer.Task) ([]byte, error) { return []byte(`1`), nil })
			w := e.worker(mux, consumer.WithConcurrency(10, 10), consumer.WithPolling(time.Second, time.Minute), consumer.WithEvents(events))
			inMsgs := func() int64 {
				v, err := srv.Varz(nil)
				if err != nil {
					t.Fatal(err)
				}
				return v.InMsgs
			}
			want := 2.0 // the result write and the ack
			if events {
				want += 2 // started and completed
			}
			before := inMsgs()
			const n = 1000
			e.publishMany(spool.Normal, "plain", n, nil)
			// Every task completed and the server received its messages
			// (the completed event follows the ack).
			streamstest.WaitFor(t, 30*time.Second, func() error {
				if c := w.Stats().Total().Completed; c < n {
					return fmt.Errorf("%d of %d completed", c, n)
				}
				if got := inMsgs() - before - n; float64(got) < want*n {
					return fmt.Errorf("%d messages from the worker, want %.0f", got, want*n)
				}
				return nil
			})
			// What the worker sent, less the n enqueues.
			perTask := float64(inMsgs()-before-n) / n
			t.Logf("%.3f messages per plain task at the server (events %t)", perTask, events)
			if perTask > want+0.1 {
				t.Errorf("the worker sent %.3f messages per plain task, want at most %.1f: a request was added to every attempt", perTask, want+0.1)
			}
		})
	}
}
