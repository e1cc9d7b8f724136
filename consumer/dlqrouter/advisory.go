package dlqrouter

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/spoolq/spool/shared/jsproto"
)

// loop pulls advisories until softCtx ends. Each advisory is handled under
// hardCtx, so a graceful stop finishes it.
func (r *Router) loop(softCtx, hardCtx context.Context, b routerBinding) error {
	defer func() {
		st := r.Stats()
		r.logger.InfoContext(hardCtx, "dlq router stopped", "routed", st.Routed, "gone", st.Gone, "bad", st.Bad, "failed", st.Failed)
	}()
	failures := 0
	var swept time.Time
	for softCtx.Err() == nil {
		if r.unservedAfter > 0 && time.Since(swept) >= min(time.Minute, r.unservedAfter/2) {
			swept = time.Now()
			if err := r.sweepUnserved(softCtx, b); err != nil && softCtx.Err() == nil {
				r.logger.WarnContext(hardCtx, "looking for tasks nobody served failed", "error", err)
			}
		}
		err := r.pull(softCtx, hardCtx, b)
		switch {
		case err == nil:
			failures = 0
			continue
		case softCtx.Err() != nil:
			return nil
		case errors.Is(err, nats.ErrConnectionClosed) || errors.Is(err, jetstream.ErrConnectionClosed):
			r.logger.ErrorContext(hardCtx, "dlq router ends: connection closed", "error", err)
			return fmt.Errorf("dlq router: %w", err)
		}
		failures++
		delay := routerBackoff(r.retryDelay, failures)
		r.logger.WarnContext(hardCtx, "pulling advisories failed", "error", err, "retry_in", delay)
		t := time.NewTimer(delay)
		select {
		case <-softCtx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
	}
	return nil
}

// pull fetches one batch and handles it. A pull that simply expired is no
// error.
func (r *Router) pull(softCtx, hardCtx context.Context, b routerBinding) error {
	fctx, cancel := context.WithTimeout(softCtx, r.fetchWait)
	defer cancel()
	batch, err := b.cons.Fetch(r.batch, jetstream.FetchContext(fctx))
	if err != nil {
		return fmt.Errorf("fetching from consumer %q: %w", r.names.RouterConsumer(), err)
	}
	for msg := range batch.Messages() {
		if softCtx.Err() != nil {
			// Stopping: hand the rest of the batch back at once rather
			// than after the ack wait.
			_ = msg.Nak() // a lost nak only delays the advisory until the ack wait
			continue
		}
		r.handle(hardCtx, b, msg)
	}
	if err := batch.Error(); err != nil && !(errors.Is(err, context.DeadlineExceeded) && softCtx.Err() == nil) {
		return fmt.Errorf("fetching from consumer %q: %w", r.names.RouterConsumer(), err)
	}
	return nil
}

// routerAdvisory is the part of the server's
// io.nats.jetstream.advisory.v1.max_deliver event the router reads
// (JSConsumerDeliveryExceededAdvisory in nats-server).
type routerAdvisory struct {
	Type       string    `json:"type"`
	ID         string    `json:"id"`
	Time       time.Time `json:"timestamp"`
	Stream     string    `json:"stream"`
	Consumer   string    `json:"consumer"`
	StreamSeq  uint64    `json:"stream_seq"`
	Deliveries uint64    `json:"deliveries"`
}

const routerAdvisoryType = "io.nats.jetstream.advisory.v1.max_deliver"

func (r *Router) parseAdvisory(data []byte) (routerAdvisory, error) {
	var a routerAdvisory
	if err := json.Unmarshal(data, &a); err != nil {
		return a, fmt.Errorf("%w: %w", ErrBadAdvisory, err)
	}
	switch {
	case a.Type != "" && a.Type != routerAdvisoryType:
		return a, fmt.Errorf("%w: type %q, want %q", ErrBadAdvisory, a.Type, routerAdvisoryType)
	case a.StreamSeq == 0:
		return a, fmt.Errorf("%w: no stream_seq", ErrBadAdvisory)
	case a.Stream != "" && !r.isTaskStream(a.Stream):
		return a, fmt.Errorf("%w: stream %q is not the task stream %q or one of its partitions", ErrBadAdvisory, a.Stream, r.names.TaskStream())
	}
	return a, nil
}

// handle acts on one advisory and settles it: ack when done or hopeless,
// nak with a delay on a transient error.
func (r *Router) handle(ctx context.Context, b routerBinding, msg jetstream.Msg) {
	ctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	log := r.logger
	adv, err := r.parseAdvisory(msg.Data())
	if err != nil {
		r.bad.Add(1)
		log.WarnContext(ctx, "dropping advisory", "error", err, "advisory_subject", msg.Subject(), "body", routerTruncate(msg.Data(), 256))
		r.ack(ctx, msg)
		return
	}
	log = log.With("stream_seq", adv.StreamSeq, "consumer", adv.Consumer, "deliveries", adv.Deliveries)
	// Every step of route is idempotent: a try that met an election is
	// run again whole, each try bounded, within the timeout; what still
	// fails is NAKed for a later retry.
	var outcome routerOutcome
	err = jsproto.Tries{PerTry: min(r.timeout, jsproto.DefaultPerTry)}.Do(ctx, "routing a dead task", func(ctx context.Context) (err error) {
		outcome, err = r.route(ctx, b, adv, log)
		return err
	})
	switch {
	case errors.Is(err, ErrBadAdvisory):
		r.bad.Add(1)
		log.WarnContext(ctx, "dropping advisory", "error", err)
	case err != nil:
		r.failed.Add(1)
		delay := r.retryDelay
		if md, merr := msg.Metadata(); merr == nil {
			delay = routerBackoff(r.retryDelay, int(md.NumDelivered))
		}
		log.WarnContext(ctx, "routing dead task failed, will retry", "error", err, "retry_in", delay)
		if nerr := msg.NakWithDelay(delay); nerr != nil {
			log.WarnContext(ctx, "nak of advisory failed; it is redelivered after the ack wait", "error", nerr)
		}
		return
	case outcome == routerGone:
		r.gone.Add(1)
		log.DebugContext(ctx, "task already gone from the task stream")
	default:
		r.routed.Add(1)
	}
	r.ack(ctx, msg)
}

func (r *Router) ack(ctx context.Context, msg jetstream.Msg) {
	// A lost ack only means the advisory comes back after the ack wait,
	// finds its task gone and is acked again.
	if err := msg.DoubleAck(ctx); err != nil {
		r.logger.WarnContext(ctx, "ack of advisory failed; it will be redelivered", "error", err)
	}
}

// isTaskStream reports whether name is SPOOL_TASKS or one of its
// partitions, SPOOL_TASKS_<k> (spool.Names.PartitionStream).
func (r *Router) isTaskStream(name string) bool {
	if name == r.names.TaskStream() {
		return true
	}
	k, ok := strings.CutPrefix(name, r.names.TaskStream()+"_")
	n, err := strconv.Atoi(k)
	return ok && err == nil && n > 0 && name == r.names.PartitionStream(n)
}

// routerBackoff is base doubled for each failure after the first, capped at
// maxRouterRetryDelay.
func routerBackoff(base time.Duration, failures int) time.Duration {
	d := base
	for i := 1; i < failures && d < maxRouterRetryDelay; i++ {
		d *= 2
	}
	return min(d, maxRouterRetryDelay)
}

func routerTruncate(b []byte, n int) string {
	if len(b) <= n {
		return string(b)
	}
	return string(b[:n]) + "…"
}
