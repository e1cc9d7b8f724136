package dlqrouter

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/spoolq/spool/consumer/internal/results"
	"github.com/spoolq/spool/shared/jsproto"
	"github.com/spoolq/spool/shared/limits"
	"github.com/spoolq/spool/shared/workflow"
)

// routerBinding is what one run of the router works on.
type routerBinding struct {
	tasks   jetstream.Stream
	parts   map[string]jetstream.Stream // task partitions after the first, by stream name
	cons    jetstream.Consumer
	results *results.Store
	wf      *workflow.Store // nil without a workflows bucket
	turns   *limits.Turns   // nil without a leases bucket (no flow control)
}

func (r *Router) bind(ctx context.Context) (routerBinding, error) {
	var b routerBinding
	// Each look-up rides out an election until ctx ends, saying what it
	// waits for now and then; a missing stream fails at once.
	retry := jsproto.Tries{PerTry: min(r.timeout, jsproto.DefaultPerTry), Logger: r.logger}
	var tasks jetstream.Stream
	err := retry.Do(ctx, "binding task stream "+r.names.TaskStream(), func(ctx context.Context) (err error) {
		tasks, err = r.js.Stream(ctx, r.names.TaskStream())
		return err
	})
	if err != nil {
		return b, fmt.Errorf("starting dlq router: binding task stream %q (is the topology provisioned?): %w", r.names.TaskStream(), err)
	}
	var cons jetstream.Consumer
	err = retry.Do(ctx, "binding consumer "+r.names.RouterConsumer(), func(ctx context.Context) (err error) {
		cons, err = r.js.Consumer(ctx, r.names.AdvisoryStream(), r.names.RouterConsumer())
		return err
	})
	if err != nil {
		return b, fmt.Errorf("starting dlq router: binding consumer %q on stream %q (is the topology provisioned?): %w",
			r.names.RouterConsumer(), r.names.AdvisoryStream(), err)
	}
	var store *results.Store
	err = retry.Do(ctx, "binding the results and unique-key buckets", func(ctx context.Context) (err error) {
		store, err = results.New(ctx, r.js, r.names, r.worker)
		if err == nil {
			store.SetEvents(!r.quiet)
		}
		return err
	})
	if err != nil {
		return b, fmt.Errorf("starting dlq router: %w", err)
	}
	wf, err := workflow.Open(ctx, r.js, r.names, r.logger)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		wf, err = nil, nil // provisioned before workflows: no step tasks to advance
	}
	if err != nil {
		return b, fmt.Errorf("starting dlq router: %w", err)
	}
	var turns *limits.Turns
	err = retry.Do(ctx, "binding the leases bucket for ordered keys", func(ctx context.Context) (err error) {
		turns, err = limits.NewTurns(ctx, r.js, r.names)
		if errors.Is(err, jetstream.ErrBucketNotFound) {
			turns, err = nil, nil // provisioned before flow control: no ordered keys
		}
		return err
	})
	if err != nil {
		return b, fmt.Errorf("starting dlq router: %w", err)
	}
	return routerBinding{tasks: tasks, parts: map[string]jetstream.Stream{}, cons: cons, results: store, wf: wf, turns: turns}, nil
}

// partition returns the task stream (partition) an advisory names, bound
// at its first advisory.
func (r *Router) partition(ctx context.Context, b routerBinding, name string) (jetstream.Stream, error) {
	if name == "" || name == r.names.TaskStream() {
		return b.tasks, nil
	}
	if s, ok := b.parts[name]; ok {
		return s, nil
	}
	s, err := r.js.Stream(ctx, name)
	if err != nil {
		return nil, fmt.Errorf("binding task partition %s: %w", name, err)
	}
	b.parts[name] = s
	return s, nil
}
