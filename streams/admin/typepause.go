package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	spool "github.com/spoolq/spool/shared"
)

// TypePauseOptions says who pauses a type, why and until when.
type TypePauseOptions struct {
	// Until ends the pause on its own; zero: until resumed.
	Until time.Time
	// By and Reason are kept with the pause and shown by status.
	By, Reason string
}

// TypeStatus is one task type that is paused or has parked tasks.
type TypeStatus struct {
	Type string `json:"type"`
	// Paused is set while the type is paused; Pause is its record (nil
	// when the type is not paused, or its pause's until has passed).
	Paused bool             `json:"paused"`
	Pause  *spool.TypePause `json:"pause,omitempty"`
	// Parked counts the type's tasks parked on spool.parked.*.<type>,
	// every priority: waiting for the resume, or being moved back.
	Parked uint64 `json:"parked"`
}

// ErrTypePauseNotProvisioned: the deployment has no pause bucket (it was
// provisioned before type pauses); provision it again.
var ErrTypePauseNotProvisioned = errors.New("type pauses are not provisioned: run spool-admin provision")

// PauseType pauses task type typ for the whole fleet: it stores a
// spool.TypePause under typ in the pause bucket, which every worker
// follows. A worker that pulls a task of the type parks it on
// spool.parked.<priority>.<type> without running it or counting an
// attempt; queued tasks of the type stay queued or parked, and other types
// and priorities run on. The pause is a KV record, so it survives worker
// and server restarts. Pausing a paused type replaces its record. Where
// workers pull by type and serve typ through consumers of its own, those
// consumers are paused by the server as well: its tasks are not pulled at
// all and wait on their task subjects.
func (c *Client) PauseType(ctx context.Context, typ string, o TypePauseOptions) (spool.TypePause, error) {
	if err := spool.ValidateType(typ); err != nil {
		return spool.TypePause{}, fmt.Errorf("pause type: %w", err)
	}
	now := time.Now().UTC()
	tp := spool.TypePause{Type: typ, By: o.By, Reason: o.Reason, At: now}
	if !o.Until.IsZero() {
		if !o.Until.After(now) {
			return spool.TypePause{}, fmt.Errorf("pause until %s: the time is past, give a later one", o.Until.Format(time.RFC3339))
		}
		until := o.Until.UTC()
		tp.Until = &until
	}
	doc, err := json.Marshal(tp)
	if err != nil {
		return spool.TypePause{}, fmt.Errorf("encoding the pause of type %q: %w", typ, err)
	}
	_, err = call(ctx, c, "pausing type "+typ, func(ctx context.Context) (uint64, error) {
		kv, err := c.pausedKV(ctx)
		if err != nil {
			return 0, err
		}
		return kv.Put(ctx, typ, doc)
	})
	if err != nil {
		return spool.TypePause{}, fmt.Errorf("pausing type %q: %w", typ, err)
	}
	if err := c.syncTypeConsumers(ctx, typ); err != nil {
		return spool.TypePause{}, fmt.Errorf("pausing type %q: %w", typ, err)
	}
	c.logger.InfoContext(ctx, "task type paused", "type", typ, "by", o.By, "reason", o.Reason, "until", tp.Until)
	return tp, nil
}

// syncTypeConsumers sets, where workers pull by type, the native pause of
// the consumers of exactly typ to what the pause bucket holds: a type
// served through its own consumers is then paused by the server and its
// tasks stay on their task subjects; one served through a wider pattern
// is parked by the workers as before.
func (c *Client) syncTypeConsumers(ctx context.Context, typ string) error {
	byType, err := call(ctx, c, "reading how workers pull", c.byType)
	if err != nil || !byType {
		return err
	}
	_, err = call(ctx, c, "setting the pause of the consumers of "+typ, func(ctx context.Context) (struct{}, error) {
		return struct{}{}, c.syncPauses(ctx, func(_ spool.Priority, pattern string) bool { return pattern == typ })
	})
	return err
}

// ResumeType resumes task type typ: it deletes its pause record. The
// workers then run its queued tasks and move its parked tasks back to
// their task subjects (within their drain interval, 2s by default, or at
// once as they hear of the resume); it does not depend on the caller.
// Resuming a type that is not paused does nothing.
func (c *Client) ResumeType(ctx context.Context, typ string) error {
	if err := spool.ValidateType(typ); err != nil {
		return fmt.Errorf("resume type: %w", err)
	}
	_, err := call(ctx, c, "resuming type "+typ, func(ctx context.Context) (struct{}, error) {
		kv, err := c.pausedKV(ctx)
		if err != nil {
			return struct{}{}, err
		}
		return struct{}{}, kv.Delete(ctx, typ)
	})
	if err != nil {
		return fmt.Errorf("resuming type %q: %w", typ, err)
	}
	if err := c.syncTypeConsumers(ctx, typ); err != nil {
		return fmt.Errorf("resuming type %q: %w", typ, err)
	}
	c.logger.InfoContext(ctx, "task type resumed", "type", typ)
	return nil
}

// Types lists the task types that are paused or have parked tasks, sorted
// by type. A deployment without the pause bucket lists none.
func (c *Client) Types(ctx context.Context) ([]TypeStatus, error) {
	return call(ctx, c, "listing paused types", c.types)
}

func (c *Client) types(ctx context.Context) ([]TypeStatus, error) {
	byType := map[string]*TypeStatus{}
	get := func(typ string) *TypeStatus {
		ts := byType[typ]
		if ts == nil {
			ts = &TypeStatus{Type: typ}
			byType[typ] = ts
		}
		return ts
	}
	kv, err := c.pausedKV(ctx)
	switch {
	case errors.Is(err, ErrTypePauseNotProvisioned):
		return nil, nil
	case err != nil:
		return nil, err
	}
	lister, err := kv.ListKeys(ctx)
	if err != nil {
		return nil, fmt.Errorf("listing paused types: %w", err)
	}
	var keys []string
	for k := range lister.Keys() {
		keys = append(keys, k)
	}
	_ = lister.Stop()
	now := time.Now()
	for _, k := range keys {
		if !spool.IsTypePauseKey(k) {
			continue // a priority's pause (spool.PriorityPauseKey)
		}
		e, err := kv.Get(ctx, k)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("reading the pause of type %q: %w", k, err)
		}
		tp := spool.TypePause{Type: k}
		if err := json.Unmarshal(e.Value(), &tp); err != nil {
			tp = spool.TypePause{Type: k} // a worker treats it as a pause without an end
		}
		if !tp.Active(now) {
			continue
		}
		ts := get(k)
		ts.Paused, ts.Pause = true, &tp
	}
	tasks, err := c.js.Stream(ctx, c.names.TaskStream())
	if err != nil {
		return nil, fmt.Errorf("reading stream %q: %w", c.names.TaskStream(), err)
	}
	info, err := tasks.Info(ctx, jetstream.WithSubjectFilter(c.names.ParkedFilter()))
	if err != nil {
		return nil, fmt.Errorf("counting parked tasks in %q: %w", c.names.TaskStream(), err)
	}
	for subj, n := range info.State.Subjects {
		_, typ, err := c.names.ParseParkedSubject(subj)
		if err != nil || n == 0 {
			continue
		}
		get(typ).Parked += n
	}
	out := make([]TypeStatus, 0, len(byType))
	for _, ts := range byType {
		out = append(out, *ts)
	}
	slices.SortFunc(out, func(a, b TypeStatus) int { return strings.Compare(a.Type, b.Type) })
	return out, nil
}

func (c *Client) pausedKV(ctx context.Context) (jetstream.KeyValue, error) {
	kv, err := c.js.KeyValue(ctx, c.names.PausedBucket())
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, fmt.Errorf("%w (bucket %q)", ErrTypePauseNotProvisioned, c.names.PausedBucket())
	}
	if err != nil {
		return nil, fmt.Errorf("binding bucket %q: %w", c.names.PausedBucket(), err)
	}
	return kv, nil
}
