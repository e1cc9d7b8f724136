package consumer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	spool "github.com/spoolq/spool/shared"
	"github.com/spoolq/spool/shared/jsproto"
)

// cancels knows the cancelled task ids and the running attempts, so a
// cancelled task never starts and a running one has its context cancelled
// as soon as the cancellation is published.
//
// It holds one core subscription to every put in the cancel bucket
// ($KV.spool_cancel.>): no JetStream API request, so it rides out leader
// elections. The ids already cancelled are listed once at start and again
// after every reconnect, when puts may have been missed.
type cancels struct {
	nc *nats.Conn
	// reconnects is the connection's reconnect count at the last load.
	reconnects uint64
	kv         jetstream.KeyValue
	prefix     string // $KV.<bucket>.
	log        *slog.Logger
	sub        *nats.Subscription

	mu sync.Mutex
	// ids are the cancelled tasks, with their cancellation when it came
	// by the subscription (a listed one is read when needed).
	ids map[string]*spool.Cancellation
	// running lists each task's running attempts (usually one), linked
	// through watch.sameTask: no allocation per attempt.
	running map[string]*watch
}

func newCancels(ctx context.Context, nc *nats.Conn, js jetstream.JetStream, names spool.Names, bind jsproto.Tries, log *slog.Logger) (*cancels, error) {
	var kv jetstream.KeyValue
	err := bind.Do(ctx, "binding the cancel bucket "+names.CancelBucket(), func(ctx context.Context) (err error) {
		kv, err = js.KeyValue(ctx, names.CancelBucket())
		return err
	})
	if err != nil {
		return nil, bindError("KV bucket", names.CancelBucket(), err)
	}
	c := &cancels{
		nc:         nc,
		reconnects: nc.Stats().Reconnects,
		kv:         kv,
		prefix:     strings.TrimSuffix(names.CancelFilter(), ">"),
		log:        log,
		ids:        make(map[string]*spool.Cancellation),
		running:    make(map[string]*watch),
	}
	// Subscribe before listing: a cancellation published meanwhile is
	// seen by one or the other.
	if c.sub, err = nc.Subscribe(names.CancelFilter(), c.onMsg); err != nil {
		return nil, fmt.Errorf("subscribing to cancellations on %q: %w", names.CancelFilter(), err)
	}
	err = bind.Do(ctx, "listing cancelled tasks", c.load)
	if err != nil {
		_ = c.sub.Unsubscribe()
		return nil, err
	}
	return c, nil
}

// reload lists the cancelled tasks again after the connection
// reconnected: cancellations published while it was down were missed.
func (c *cancels) reload(ctx context.Context, timeout time.Duration) {
	n := c.nc.Stats().Reconnects
	if n == c.reconnects {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if err := c.load(ctx); err != nil {
		c.log.Warn("reloading cancelled tasks after a reconnect; trying again", "error", err)
		return
	}
	c.reconnects = n
}

// load adds every id in the bucket to the cancelled set.
func (c *cancels) load(ctx context.Context) error {
	lister, err := c.kv.ListKeys(ctx)
	if err != nil {
		return fmt.Errorf("listing cancelled tasks: %w", err)
	}
	defer func() { _ = lister.Stop() }()
	n := 0
	for id := range lister.Keys() {
		c.add(id, nil)
		n++
	}
	if ctx.Err() != nil {
		return fmt.Errorf("listing cancelled tasks (%d so far): %w", n, ctx.Err())
	}
	return nil
}

func (c *cancels) onMsg(m *nats.Msg) {
	id, ok := strings.CutPrefix(m.Subject, c.prefix)
	if !ok || id == "" {
		return
	}
	if op := m.Header.Get("KV-Operation"); op == "DEL" || op == "PURGE" {
		c.mu.Lock()
		delete(c.ids, id)
		c.mu.Unlock()
		return
	}
	var doc *spool.Cancellation
	if err := json.Unmarshal(m.Data, &doc); err != nil {
		doc = nil // read from the bucket when needed
	}
	c.add(id, doc)
}

// add marks id cancelled (doc: its cancellation, nil when unknown) and
// cancels its running attempts.
func (c *cancels) add(id string, doc *spool.Cancellation) {
	c.mu.Lock()
	if have := c.ids[id]; doc != nil || have == nil {
		c.ids[id] = doc
	}
	var hs []*watch
	for h := c.running[id]; h != nil; h = h.sameTask {
		hs = append(hs, h)
	}
	c.mu.Unlock()
	for _, h := range hs {
		c.log.Info("cancelling running task", "task_id", id)
		h.cancelTask()
	}
}

func (c *cancels) cancelled(id string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.ids[id]
	return ok
}

// track registers a running attempt; it is cancelled at once when its task
// already is.
func (c *cancels) track(id string, h *watch) {
	c.mu.Lock()
	h.sameTask = c.running[id]
	c.running[id] = h
	_, gone := c.ids[id]
	c.mu.Unlock()
	if gone {
		h.cancelTask()
	}
}

func (c *cancels) untrack(id string, h *watch) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch head := c.running[id]; {
	case head == h && h.sameTask == nil:
		delete(c.running, id)
	case head == h:
		c.running[id] = h.sameTask
	default:
		for prev := head; prev != nil; prev = prev.sameTask {
			if prev.sameTask == h {
				prev.sameTask = h.sameTask
				break
			}
		}
	}
	h.sameTask = nil
}

// get returns the cancellation of id: as it arrived, else read from the
// bucket; a missing or unreadable one gives a document with the id only.
// (The put reaches subscribers as the stream stores it, so a read right
// after the message may not find it yet: the message's copy is kept.)
func (c *cancels) get(ctx context.Context, id string) spool.Cancellation {
	c.mu.Lock()
	have := c.ids[id]
	c.mu.Unlock()
	if have != nil {
		return *have
	}
	doc := spool.Cancellation{ID: id}
	e, err := c.kv.Get(ctx, id)
	if err != nil {
		c.log.Warn("reading cancellation", "task_id", id, "error", err)
		return doc
	}
	if err := json.Unmarshal(e.Value(), &doc); err != nil {
		c.log.Warn("decoding cancellation", "task_id", id, "error", err)
	}
	return doc
}

func (c *cancels) close() {
	if err := c.sub.Unsubscribe(); err != nil && !errors.Is(err, nats.ErrConnectionClosed) {
		c.log.Warn("unsubscribing from cancellations", "error", err)
	}
}

// stored reports whether task id has a cancellation in the bucket (read
// from the bucket: the local view may not have heard of it yet).
func (c *cancels) stored(ctx context.Context, id string) (bool, error) {
	if c.cancelled(id) {
		return true, nil
	}
	_, err := c.kv.Get(ctx, id)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, jetstream.ErrKeyNotFound):
		return false, nil
	}
	return false, fmt.Errorf("reading the cancellation of task %s: %w", id, err)
}
