package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/spoolq/spool/consumer"
)

// HoldBucket is the KV bucket a fault.task run with "hold" waits on. The
// test creates it, and puts the hold's key to let the runs waiting on it
// return.
const HoldBucket = "fault_holds"

// holds makes runs wait until the test lets them go, so a task keeps its
// slot, its key's turn or its running place for as long as the test needs.
// The key is stored in a bucket, so a run that starts after the key was
// put, on a worker started later, returns at once.
type holds struct {
	js jetstream.JetStream
}

// wait returns nil once key exists in HoldBucket, or the context's error
// when the attempt's context ends first: a cancel, its deadline, or the
// worker's shutdown. A missing bucket is a permanent error.
func (h *holds) wait(ctx context.Context, key string) error {
	kv, err := h.js.KeyValue(ctx, HoldBucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return consumer.Permanent(fmt.Errorf("hold %q: the bucket %s does not exist", key, HoldBucket))
	}
	if err != nil {
		return fmt.Errorf("hold %q: binding the bucket %s: %w", key, HoldBucket, err)
	}
	w, err := kv.Watch(ctx, key)
	if err != nil {
		return fmt.Errorf("hold %q: watching it: %w", key, err)
	}
	defer func() { _ = w.Stop() }()
	for {
		select {
		case e, ok := <-w.Updates():
			if !ok {
				if err := ctx.Err(); err != nil {
					return err
				}
				return fmt.Errorf("hold %q: the watch ended", key)
			}
			// nil marks the end of the values stored before the watch.
			if e != nil && e.Operation() == jetstream.KeyValuePut {
				return nil
			}
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
