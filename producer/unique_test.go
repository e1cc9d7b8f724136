package producer_test

import (
	"errors"
	"testing"
	"time"

	"github.com/spoolq/spool/producer"
	"github.com/spoolq/spool/streams/streamstest"
)

func TestUniqueKeyBlocksAndReleases(t *testing.T) {
	t.Parallel()
	e := startEnv(t)
	ctx := ctxFor(t)
	task := producer.NewTask("digest", []byte("d"))
	first, err := e.client.Enqueue(ctx, task, producer.Unique("user-1", time.Hour))
	if err != nil {
		t.Fatal(err)
	}

	// Another task with the live key is refused, naming the holder.
	_, err = e.client.Enqueue(ctx, task, producer.Unique("user-1", time.Hour))
	var conflict *producer.UniqueConflictError
	if !errors.As(err, &conflict) || !errors.Is(err, producer.ErrUniqueConflict) {
		t.Fatalf("want a UniqueConflictError, got %v", err)
	}
	if conflict.ExistingID != first.ID || conflict.Key != "user-1" {
		t.Fatalf("conflict %+v, want holder %s", conflict, first.ID)
	}

	// Retrying the same task (same id) is not a conflict: it is a duplicate.
	again, err := e.client.Enqueue(ctx, task, producer.TaskID(first.ID), producer.Unique("user-1", time.Hour))
	if err != nil || !again.Duplicate {
		t.Fatalf("retry of the holder: %+v, %v", again, err)
	}

	// Another key is independent.
	if _, err := e.client.Enqueue(ctx, task, producer.Unique("user-2", time.Hour)); err != nil {
		t.Fatal(err)
	}
	if n := e.streamMsgs(t); n != 2 {
		t.Fatalf("stream holds %d tasks, want 2", n)
	}
}

func TestUniqueKeyExpires(t *testing.T) {
	t.Parallel()
	e := startEnv(t)
	ctx := ctxFor(t)
	if _, err := e.client.Enqueue(ctx, producer.NewTask("ping", nil), producer.Unique("short", time.Second)); err != nil {
		t.Fatal(err)
	}
	streamstest.WaitFor(t, 10*time.Second, func() error {
		_, err := e.client.Enqueue(ctx, producer.NewTask("ping", nil), producer.Unique("short", time.Second))
		return err
	})
}

func TestUniqueKeyReleasedWhenPublishFails(t *testing.T) {
	t.Parallel()
	e := startEnv(t)
	ctx := ctxFor(t)
	e.shrinkMaxMsgSize(t, 1024)
	_, err := e.client.Enqueue(ctx, producer.NewTask("big", make([]byte, 4096)), producer.Unique("k", time.Hour))
	if !errors.Is(err, producer.ErrPayloadTooLarge) {
		t.Fatalf("want ErrPayloadTooLarge from the server, got %v", err)
	}
	if holder, ok := e.uniqueHolder(t, "k"); ok {
		t.Fatalf("unique key still held by %q after the publish failed", holder)
	}
	if _, err := e.client.Enqueue(ctx, producer.NewTask("small", nil), producer.Unique("k", time.Hour)); err != nil {
		t.Fatalf("key not reusable: %v", err)
	}
}
