package producer

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	spool "github.com/spoolq/spool/shared"
)

// claimAttempts bounds the create/read loop when a key expires between a
// failed Create and the read of its holder.
const claimAttempts = 3

// claimUnique claims p's unique key for p's id with KV Create and the key's
// TTL. claimed is true when this call created the key (and so must release
// it if the publish fails). A key already held by the same id is a retried
// enqueue of the same task: not claimed, no error.
func (c *Client) claimUnique(ctx context.Context, p prepared) (claimed bool, err error) {
	if p.uniqueKey == "" {
		return false, nil
	}
	kv, err := c.uniqueBucket(ctx)
	if err != nil {
		return false, err
	}
	kvKey := spool.UniqueKVKey(p.uniqueKey)
	for range claimAttempts {
		// A retried Create whose first try was stored finds the key held
		// by this id: not claimed, no error.
		err := c.do(ctx, "claiming unique key "+p.uniqueKey, func(ctx context.Context) error {
			_, err := kv.Create(ctx, kvKey, []byte(p.id), jetstream.KeyTTL(p.uniqueTTL))
			return err
		})
		if err == nil {
			return true, nil
		}
		if !errors.Is(err, jetstream.ErrKeyExists) {
			return false, fmt.Errorf("claiming unique key %q for task %q: %w", p.uniqueKey, p.id, translate(err))
		}
		var entry jetstream.KeyValueEntry
		err = c.do(ctx, "reading unique key "+p.uniqueKey, func(ctx context.Context) (err error) {
			entry, err = kv.Get(ctx, kvKey)
			return err
		})
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			continue // expired or released meanwhile: try again
		}
		if err != nil {
			return false, fmt.Errorf("reading unique key %q: %w", p.uniqueKey, err)
		}
		holder := string(entry.Value())
		if holder == p.id {
			return false, nil
		}
		return false, &UniqueConflictError{Key: p.uniqueKey, ExistingID: holder}
	}
	return false, fmt.Errorf("claiming unique key %q for task %q: key keeps changing, gave up after %d attempts", p.uniqueKey, p.id, claimAttempts)
}

// releaseUnique deletes key if it still names task id. It runs after a
// failed publish, whose context may be done, so it gets a context of its
// own bounded by the client's timeout. Failures are logged: the key then
// lives until its TTL.
func (c *Client) releaseUnique(ctx context.Context, key, id string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.timeout)
	defer cancel()
	released, err := c.deleteUniqueIfHeld(ctx, key, id)
	switch {
	case err != nil:
		c.logger.WarnContext(ctx, "releasing unique key failed; it expires with its TTL",
			"unique_key", key, "task_id", id, "error", err)
	case released:
		c.logger.DebugContext(ctx, "unique key released", "unique_key", key, "task_id", id)
	}
}

// deleteUniqueIfHeld deletes key only if its value is still id, using the
// entry's revision so a key claimed meanwhile by another task survives.
func (c *Client) deleteUniqueIfHeld(ctx context.Context, key, id string) (bool, error) {
	kv, err := c.uniqueBucket(ctx)
	if err != nil {
		return false, err
	}
	kvKey := spool.UniqueKVKey(key)
	var entry jetstream.KeyValueEntry
	err = c.do(ctx, "reading unique key "+key, func(ctx context.Context) (err error) {
		entry, err = kv.Get(ctx, kvKey)
		return err
	})
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("reading unique key %q: %w", key, err)
	}
	if string(entry.Value()) != id {
		return false, nil
	}
	err = c.do(ctx, "deleting unique key "+key, func(ctx context.Context) error {
		return kv.Delete(ctx, kvKey, jetstream.LastRevision(entry.Revision()))
	})
	if err != nil {
		if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyExists) {
			return false, nil // gone, or claimed by another task meanwhile
		}
		return false, fmt.Errorf("deleting unique key %q: %w", key, err)
	}
	return true, nil
}
