package streams

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	spool "github.com/spoolq/spool/shared"
	"github.com/spoolq/spool/shared/logging"
)

// MinAPILevel is the JetStream API level of nats-server 2.12, the first with
// message scheduling, which delayed tasks need.
const MinAPILevel = 2

// CheckServer refuses servers whose JetStream API level is below MinAPILevel.
func CheckServer(ctx context.Context, js jetstream.JetStream) error {
	info, err := js.AccountInfo(ctx)
	if err != nil {
		return fmt.Errorf("reading JetStream account info: %w", err)
	}
	if info.API.Level < MinAPILevel {
		return fmt.Errorf("%w: JetStream API level %d, Spool needs level %d (nats-server 2.12 or newer) for message scheduling",
			ErrServerTooOld, info.API.Level, MinAPILevel)
	}
	return nil
}

// Provision creates or updates every object of t. It checks the server first
// and stops at the first object that conflicts, naming it and the field.
func Provision(ctx context.Context, js jetstream.JetStream, t Topology, logger *slog.Logger) error {
	logger = logging.OrDefault(logger)
	if err := CheckServer(ctx, js); err != nil {
		return err
	}
	if err := checkShrink(ctx, js, t); err != nil {
		return err
	}
	t, err := resolveConsumers(ctx, js, t)
	if err != nil {
		return err
	}
	if err := checkConsumerSwitch(ctx, js, t); err != nil {
		return err
	}
	cfgs := []jetstream.StreamConfig{t.DLQStreamConfig(), t.AdvisoryStreamConfig()}
	for k := range t.Settings.Partitions {
		cfgs = append(cfgs, t.PartitionStreamConfig(k))
	}
	for _, cfg := range cfgs {
		if err := ensureStream(ctx, js, cfg, logger); err != nil {
			return err
		}
	}
	for k := range t.Settings.Partitions {
		for _, p := range spool.Priorities {
			if t.Settings.Consumers == ConsumersByType {
				if err := removeConsumer(ctx, js, t.Names.PartitionStream(k), t.Names.Consumer(p), logger); err != nil {
					return err
				}
				continue
			}
			if err := ensureConsumer(ctx, js, t.Names.PartitionStream(k), t.ConsumerConfig(p), logger); err != nil {
				return err
			}
		}
	}
	if err := ensureConsumer(ctx, js, t.Names.AdvisoryStream(), t.RouterConsumerConfig(), logger); err != nil {
		return err
	}
	for _, cfg := range []jetstream.KeyValueConfig{t.ResultsConfig(), t.UniqueConfig(), t.CancelConfig(), t.PausedConfig(), t.LimitsConfig(), t.LeasesConfig(), t.WorkflowsConfig()} {
		if err := ensureBucket(ctx, js, cfg, logger); err != nil {
			return err
		}
	}
	return SpreadLeaders(ctx, js, t, logger)
}

func ensureStream(ctx context.Context, js jetstream.JetStream, want jetstream.StreamConfig, logger *slog.Logger) error {
	s, err := js.Stream(ctx, want.Name)
	switch {
	case errors.Is(err, jetstream.ErrStreamNotFound):
		if _, err := js.CreateStream(ctx, want); err != nil {
			return fmt.Errorf("creating stream %q: %w", want.Name, err)
		}
		logger.InfoContext(ctx, "stream created", "stream", want.Name)
		return nil
	case err != nil:
		return fmt.Errorf("looking up stream %q: %w", want.Name, err)
	}
	have := s.CachedInfo().Config
	if err := streamConflict(have, want); err != nil {
		return err
	}
	if _, err := js.UpdateStream(ctx, want); err != nil {
		return fmt.Errorf("updating stream %q: %w", want.Name, err)
	}
	logger.DebugContext(ctx, "stream up to date", "stream", want.Name)
	return nil
}

// streamConflict reports fields JetStream will not change on an existing
// stream.
func streamConflict(have, want jetstream.StreamConfig) error {
	if have.Retention != want.Retention {
		return fmt.Errorf("%w: stream %q has retention %s, Spool needs %s; retention cannot change: delete the stream or use another SPOOL_PREFIX",
			ErrConflict, want.Name, have.Retention, want.Retention)
	}
	if have.Storage != want.Storage {
		return fmt.Errorf("%w: stream %q has %s storage, Spool is configured for %s (SPOOL_STORAGE); storage cannot change: delete the stream or change SPOOL_STORAGE",
			ErrConflict, want.Name, have.Storage, want.Storage)
	}
	if have.AllowMsgSchedules && !want.AllowMsgSchedules {
		return fmt.Errorf("%w: stream %q allows message schedules, which cannot be turned off", ErrConflict, want.Name)
	}
	return nil
}

func ensureConsumer(ctx context.Context, js jetstream.JetStream, stream string, want jetstream.ConsumerConfig, logger *slog.Logger) error {
	c, err := js.Consumer(ctx, stream, want.Durable)
	switch {
	case errors.Is(err, jetstream.ErrConsumerNotFound):
		if _, err := js.CreateConsumer(ctx, stream, want); err != nil {
			return fmt.Errorf("creating consumer %q on stream %q: %w", want.Durable, stream, err)
		}
		logger.InfoContext(ctx, "consumer created", "stream", stream, "consumer", want.Durable)
		return nil
	case err != nil:
		return fmt.Errorf("looking up consumer %q on stream %q: %w", want.Durable, stream, err)
	}
	have := c.CachedInfo().Config
	if have.DeliverSubject != "" {
		return fmt.Errorf("%w: consumer %q on stream %q is a push consumer (deliver subject %q), Spool needs a pull consumer: delete it",
			ErrConflict, want.Durable, stream, have.DeliverSubject)
	}
	if have.AckPolicy != want.AckPolicy {
		return fmt.Errorf("%w: consumer %q on stream %q has ack policy %s, Spool needs %s; the ack policy cannot change: delete it",
			ErrConflict, want.Durable, stream, have.AckPolicy, want.AckPolicy)
	}
	if have.DeliverPolicy != want.DeliverPolicy {
		return fmt.Errorf("%w: consumer %q on stream %q has deliver policy %s, Spool needs %s; the deliver policy cannot change: delete it",
			ErrConflict, want.Durable, stream, have.DeliverPolicy, want.DeliverPolicy)
	}
	// A pause is an operator's decision (admin.PausePriority): provisioning
	// keeps it.
	want.PauseUntil = have.PauseUntil
	if _, err := js.UpdateConsumer(ctx, stream, want); err != nil {
		return fmt.Errorf("updating consumer %q on stream %q: %w", want.Durable, stream, err)
	}
	return nil
}

func ensureBucket(ctx context.Context, js jetstream.JetStream, want jetstream.KeyValueConfig, logger *slog.Logger) error {
	streamName := "KV_" + want.Bucket
	s, err := js.Stream(ctx, streamName)
	switch {
	case errors.Is(err, jetstream.ErrStreamNotFound):
		if _, err := js.CreateKeyValue(ctx, want); err != nil {
			return fmt.Errorf("creating KV bucket %q: %w", want.Bucket, err)
		}
		logger.InfoContext(ctx, "kv bucket created", "bucket", want.Bucket)
		return hardenBucket(ctx, js, want)
	case err != nil:
		return fmt.Errorf("looking up KV bucket %q: %w", want.Bucket, err)
	}
	have := s.CachedInfo().Config
	if have.Storage != want.Storage {
		return fmt.Errorf("%w: KV bucket %q has %s storage, Spool is configured for %s (SPOOL_STORAGE); storage cannot change: delete the bucket or change SPOOL_STORAGE",
			ErrConflict, want.Bucket, have.Storage, want.Storage)
	}
	if _, err := js.UpdateKeyValue(ctx, want); err != nil {
		return fmt.Errorf("updating KV bucket %q: %w", want.Bucket, err)
	}
	return hardenBucket(ctx, js, want)
}

// BucketConsumerInactivity bounds how long a consumer on a bucket's stream
// outlives its last use, so a durable consumer a role creates there is
// removed once unused. It leaves room for the KV watches of every client:
// nats.js asks for 5 minutes, nats.go for 5 minutes too.
const BucketConsumerInactivity = 10 * time.Minute

// hardenBucket narrows the stream behind a bucket beyond what nats.go sets:
// it refuses roll-ups (a Nats-Rollup header would let any writer of one key
// erase every other key) unless the bucket needs them, and bounds the life
// of unused consumers (BucketConsumerInactivity). A bucket with per-key TTL
// markers keeps roll-ups: the server requires them for the markers, and only
// roles that may delete every key of such a bucket write it. nats.go turns
// roll-ups on at every create and update, so this runs after each.
func hardenBucket(ctx context.Context, js jetstream.JetStream, want jetstream.KeyValueConfig) error {
	name := "KV_" + want.Bucket
	s, err := js.Stream(ctx, name)
	if err != nil {
		return fmt.Errorf("looking up KV bucket %q: %w", want.Bucket, err)
	}
	cfg := s.CachedInfo().Config
	rollup := BucketNeedsRollup(want)
	if cfg.AllowRollup == rollup && cfg.ConsumerLimits.InactiveThreshold == BucketConsumerInactivity {
		return nil
	}
	cfg.AllowRollup = rollup
	cfg.ConsumerLimits.InactiveThreshold = BucketConsumerInactivity
	if _, err := js.UpdateStream(ctx, cfg); err != nil {
		return fmt.Errorf("narrowing KV bucket %q (roll-ups, consumer lifetime): %w", want.Bucket, err)
	}
	return nil
}

// BucketNeedsRollup reports whether the server requires roll-ups on the
// bucket's stream: per-key TTL markers (LimitMarkerTTL) need them.
func BucketNeedsRollup(cfg jetstream.KeyValueConfig) bool {
	return cfg.LimitMarkerTTL > 0
}

// checkShrink refuses fewer partitions than a previous provisioning made:
// the tasks of a partition no worker pulls would wait forever.
func checkShrink(ctx context.Context, js jetstream.JetStream, t Topology) error {
	name := t.Names.PartitionStream(t.Settings.Partitions)
	_, err := js.Stream(ctx, name)
	switch {
	case errors.Is(err, jetstream.ErrStreamNotFound):
		return nil
	case err != nil:
		return fmt.Errorf("looking up stream %q: %w", name, err)
	}
	return fmt.Errorf("%w: stream %q exists but SPOOL_PARTITIONS is %d; partitions cannot shrink while tasks may wait in them: drain and delete %q and the partitions after it, or raise SPOOL_PARTITIONS",
		ErrConflict, name, t.Settings.Partitions, name)
}
