package consumer

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	spool "github.com/spoolq/spool/shared"
	"github.com/spoolq/spool/shared/jsproto"
	"github.com/spoolq/spool/streams"
)

// errCodeFilterNotUnique is the server's refusal of a consumer whose
// filter overlaps another's on a WorkQueue stream.
const errCodeFilterNotUnique jetstream.ErrorCode = 10100

// bindConsumer binds the consumer of priority p on stream: the priority's
// own when pattern is empty, else the consumer of pattern, made from the
// template SPOOL_TASKS records (taskCfg) when no worker has made it yet.
func (d *dispatcher) bindConsumer(ctx context.Context, js jetstream.JetStream, bind jsproto.Tries, stream jetstream.Stream, taskCfg jetstream.StreamConfig, p spool.Priority, pattern string) (jetstream.Consumer, error) {
	streamName := stream.CachedInfo().Config.Name
	if pattern == "" {
		name := d.o.Names.Consumer(p)
		var c jetstream.Consumer
		err := bind.Do(ctx, "binding consumer "+name+" of "+streamName, func(ctx context.Context) (err error) {
			c, err = stream.Consumer(ctx, name)
			return err
		})
		if err != nil {
			return nil, bindError("consumer", streamName+" "+name, err)
		}
		return c, nil
	}
	want := streams.TypeConsumerConfig(d.o.Names, taskCfg, p, pattern)
	var c jetstream.Consumer
	made := false
	err := bind.Do(ctx, "binding consumer "+want.Durable+" of "+streamName, func(ctx context.Context) (err error) {
		c, err = stream.Consumer(ctx, want.Durable)
		if !errors.Is(err, jetstream.ErrConsumerNotFound) {
			return err
		}
		// Made paused when a pause holds already, so no worker binding
		// it meanwhile pulls during the pause; a pause recorded while it
		// is being made is joined after (inheritPause).
		if until, err := d.pauseOf(ctx, js, p, pattern); err != nil {
			return err
		} else if !until.IsZero() {
			want.PauseUntil = &until
		}
		c, err = stream.CreateConsumer(ctx, want)
		if errors.Is(err, jetstream.ErrConsumerExists) {
			c, err = stream.Consumer(ctx, want.Durable) // another worker made it meanwhile
		}
		made = err == nil
		return err
	})
	if err != nil {
		var apiErr *jetstream.APIError
		if errors.As(err, &apiErr) && apiErr.ErrorCode == errCodeFilterNotUnique {
			return nil, fmt.Errorf("%w: serving %q: another worker pulls an overlapping type pattern from %s (%w); workers that serve the same types must declare the same patterns",
				ErrInvalidOption, pattern, streamName, err)
		}
		return nil, bindError("consumer", streamName+" "+want.Durable, err)
	}
	if made {
		d.log.InfoContext(ctx, "type consumer made", "stream", streamName, "consumer", want.Durable, "filter", want.FilterSubject)
		if err := d.inheritPause(ctx, js, stream, c, p, pattern); err != nil {
			d.log.WarnContext(ctx, "could not read whether the priority or type is paused", "priority", p.String(), "pattern", pattern, "error", err)
		}
	}
	return c, nil
}

// inheritPause pauses a type consumer just made when its priority or its
// exact type is paused: where workers pull by type, a pause is a record in
// the pause bucket that admin applies to the consumers that exist, and one
// made afterwards reads it. Read once more after the consumer is made, a
// record admin wrote while it was being made is joined too.
func (d *dispatcher) inheritPause(ctx context.Context, js jetstream.JetStream, stream jetstream.Stream, c jetstream.Consumer, p spool.Priority, pattern string) error {
	until, err := d.pauseOf(ctx, js, p, pattern)
	if err != nil || until.IsZero() {
		return err
	}
	_, err = stream.PauseConsumer(ctx, c.CachedInfo().Name, until)
	return err
}

// pauseOf is how long the type consumer of p and pattern is to stay
// paused (streams.TypeConsumerPause); zero when no pause holds or the
// deployment has no pause bucket.
func (d *dispatcher) pauseOf(ctx context.Context, js jetstream.JetStream, p spool.Priority, pattern string) (time.Time, error) {
	kv, err := js.KeyValue(ctx, d.o.Names.PausedBucket())
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return time.Time{}, nil
	}
	if err != nil {
		return time.Time{}, err
	}
	return streams.TypeConsumerPause(ctx, kv, p, pattern, time.Now())
}
