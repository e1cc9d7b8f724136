package admin

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	spool "github.com/spoolq/spool/shared"
	"github.com/spoolq/spool/streams"
)

// UnservedType is a task type with queued tasks that no consumer
// delivers: where workers pull by type, no worker serving it has started.
// Its tasks wait until one does.
type UnservedType struct {
	Type     string         `json:"type"`
	Priority spool.Priority `json:"priority"`
	// Queued counts its tasks on the priority's task subject.
	Queued uint64 `json:"queued"`
	// OldestWait is the age of its oldest queued task.
	OldestWait time.Duration `json:"oldest_wait_ns"`
}

// maxUnservedListed caps Status.Unserved: each entry costs a read of its
// oldest task.
const maxUnservedListed = 100

// priorityConsumers returns the consumers of each priority on one task
// stream: the priority's own, or where workers pull by type every type
// consumer of it.
func (c *Client) priorityConsumers(ctx context.Context, part jetstream.Stream, byType bool) ([len(spool.Priorities)][]*jetstream.ConsumerInfo, error) {
	var out [len(spool.Priorities)][]*jetstream.ConsumerInfo
	name := part.CachedInfo().Config.Name
	if !byType {
		for _, p := range spool.Priorities {
			cons, err := part.Consumer(ctx, c.names.Consumer(p))
			if err != nil {
				return out, consumerError(c.names.Consumer(p), err)
			}
			out[p] = []*jetstream.ConsumerInfo{cons.CachedInfo()}
		}
		return out, nil
	}
	list := part.ListConsumers(ctx)
	for info := range list.Info() {
		if p, _, ok := c.names.ParseTypeConsumer(info.Name); ok {
			out[p] = append(out[p], info)
		}
	}
	if err := list.Err(); err != nil {
		return out, fmt.Errorf("listing the consumers of stream %q: %w", name, err)
	}
	return out, nil
}

// unserved lists the task types queued on part that none of cons (every
// consumer of the stream, by priority) delivers, oldest first, at most
// maxUnservedListed.
func (c *Client) unserved(ctx context.Context, part jetstream.Stream, cons [len(spool.Priorities)][]*jetstream.ConsumerInfo) ([]UnservedType, error) {
	filter := c.names.Prefix() + ".tasks.>"
	info, err := part.Info(ctx, jetstream.WithSubjectFilter(filter))
	if err != nil {
		return nil, fmt.Errorf("listing the task subjects of stream %q: %w", part.CachedInfo().Config.Name, err)
	}
	var out []UnservedType
	for subject, n := range info.State.Subjects {
		p, typ, err := c.names.ParseTaskSubject(subject)
		if err != nil || n == 0 {
			continue
		}
		served := slices.ContainsFunc(cons[p], func(ci *jetstream.ConsumerInfo) bool {
			_, pattern, _ := c.names.ParseTypeConsumer(ci.Name)
			return spool.MatchType(pattern, typ)
		})
		if !served {
			out = append(out, UnservedType{Type: typ, Priority: p, Queued: n})
		}
	}
	slices.SortFunc(out, func(a, b UnservedType) int {
		if d := int(b.Queued) - int(a.Queued); d != 0 {
			return d
		}
		return strings.Compare(a.Type, b.Type)
	})
	if len(out) > maxUnservedListed {
		out = out[:maxUnservedListed]
	}
	for i := range out {
		subject, _ := c.names.TaskSubject(out[i].Priority, out[i].Type)
		msg, err := part.GetMsg(ctx, 1, jetstream.WithGetMsgSubject(subject))
		if err != nil {
			continue // taken meanwhile: the count stands as read
		}
		out[i].OldestWait = time.Since(msg.Time)
	}
	return out, nil
}

// byType reports whether workers pull by type.
func (c *Client) byType(ctx context.Context) (bool, error) {
	tasks, err := c.js.Stream(ctx, c.names.TaskStream())
	if err != nil {
		return false, fmt.Errorf("reading stream %q: %w", c.names.TaskStream(), err)
	}
	return streams.ConsumersOf(tasks.CachedInfo().Config) == streams.ConsumersByType, nil
}

// syncPauses sets, where workers pull by type, the native pause of every
// type consumer that match selects to what the pause bucket holds for it
// (streams.TypeConsumerPause): paused until the later end of its
// priority's pause and its exact type's, resumed when neither holds. The
// records are written first, so a consumer a worker makes meanwhile reads
// them itself.
func (c *Client) syncPauses(ctx context.Context, match func(p spool.Priority, pattern string) bool) error {
	kv, err := c.pausedKV(ctx)
	if err != nil {
		return err
	}
	parts, err := c.partitions(ctx)
	if err != nil {
		return err
	}
	now := time.Now()
	for _, stream := range parts {
		s, err := c.js.Stream(ctx, stream)
		if err != nil {
			return fmt.Errorf("reading stream %q: %w", stream, err)
		}
		list := s.ListConsumers(ctx)
		for info := range list.Info() {
			p, pattern, ok := c.names.ParseTypeConsumer(info.Name)
			if !ok || !match(p, pattern) {
				continue
			}
			until, err := streams.TypeConsumerPause(ctx, kv, p, pattern, now)
			if err != nil {
				return err
			}
			switch {
			case !until.IsZero():
				_, err = s.PauseConsumer(ctx, info.Name, until)
			case info.Paused:
				_, err = s.ResumeConsumer(ctx, info.Name)
			}
			if err != nil {
				return fmt.Errorf("setting the pause of consumer %q on %s: %w", info.Name, stream, err)
			}
		}
		if err := list.Err(); err != nil {
			return fmt.Errorf("listing the consumers of stream %q: %w", stream, err)
		}
	}
	return nil
}

// recordedPauses marks, where workers pull by type, the priorities whose
// pause the pause bucket holds. A priority's pause is a record there that
// the type consumers follow; with no type consumer of the priority yet,
// the record alone says it is paused. A deployment without the bucket has
// no such pause.
func (c *Client) recordedPauses(ctx context.Context, ps []PriorityStatus) error {
	kv, err := c.js.KeyValue(ctx, c.names.PausedBucket())
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("binding bucket %q: %w", c.names.PausedBucket(), err)
	}
	now := time.Now()
	for i := range ps {
		// The pattern ">" matches no exact type: only the priority's
		// own pause is read.
		until, err := streams.TypeConsumerPause(ctx, kv, ps[i].Priority, ">", now)
		if err != nil {
			return err
		}
		if !until.IsZero() {
			ps[i].Paused, ps[i].PausedUntil = true, &until
		}
	}
	return nil
}
