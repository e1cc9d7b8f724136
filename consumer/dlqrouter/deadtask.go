package dlqrouter

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	spool "github.com/spoolq/spool/shared"
	"github.com/spoolq/spool/shared/limits"
	"github.com/spoolq/spool/shared/workflow"
	"github.com/spoolq/spool/streams/dlq"
)

// routerOutcome is what happened to the task an advisory named.
type routerOutcome int

const (
	routerRouted routerOutcome = iota
	routerGone
)

// route moves the task of adv to the dead-letter stream. Every step is
// idempotent.
func (r *Router) route(ctx context.Context, b routerBinding, adv routerAdvisory, log *slog.Logger) (routerOutcome, error) {
	tasks, err := r.partition(ctx, b, adv.Stream)
	if err != nil {
		return 0, err
	}
	raw, err := tasks.GetMsg(ctx, adv.StreamSeq)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return routerGone, nil
	}
	if err != nil {
		return 0, fmt.Errorf("reading task seq %d from %s: %w", adv.StreamSeq, tasks.CachedInfo().Config.Name, err)
	}
	if strings.HasPrefix(raw.Subject, r.names.Prefix()+".sched.") {
		return 0, fmt.Errorf("%w: seq %d is the pending schedule %q, which no Spool consumer delivers; left alone",
			ErrBadAdvisory, adv.StreamSeq, raw.Subject)
	}
	if _, _, err := r.names.ParseTaskSubject(raw.Subject); err != nil {
		log.WarnContext(ctx, "dead task is not on a task subject; dead-lettering it under type unknown",
			"subject", raw.Subject, "dlq_subject", dlq.SubjectFor(r.names, raw.Subject))
	}

	attempts := int(adv.Deliveries)
	m := dlq.MessageFromRaw(raw, spool.ReasonMaxDeliver, fmt.Sprintf(routerMaxDeliverError, attempts), attempts)
	// The advisory's time is the same for every router and every retry, so
	// the dead letter and the result document agree whoever writes them.
	m.FailedAt = adv.Time
	if m.FailedAt.IsZero() {
		m.FailedAt = time.Now()
	}
	if err := r.deadLetter(ctx, b, tasks, raw, m, log); err != nil {
		return 0, err
	}
	log.InfoContext(ctx, "task dead-lettered after exhausting its deliveries", "dlq_subject", dlq.SubjectFor(r.names, raw.Subject))
	return routerRouted, nil
}

// deadLetter moves raw, a task of the task stream tasks, to the dead-letter
// stream as m: the dead letter, the dead result document, the failed
// workflow step, the key's turn passed on, the task deleted. Every step is
// idempotent.
func (r *Router) deadLetter(ctx context.Context, b routerBinding, tasks jetstream.Stream, raw *jetstream.RawStreamMsg, m dlq.Message, log *slog.Logger) error {
	if name := tasks.CachedInfo().Config.Name; name != r.names.TaskStream() {
		m.Stream = name
	}
	// The dead letter carries the task id in Spool-Task-Id (dlq.Header).
	id := r.names.TaskID(raw.Header, m.Stream, raw.Sequence)
	log = log.With("task_id", id, "subject", raw.Subject)

	if err := dlq.Publish(ctx, r.js, r.names, m); err != nil {
		return err
	}
	if err := b.results.Dead(ctx, m); err != nil {
		return fmt.Errorf("recording dead task %s: %w", id, err)
	}
	// A workflow step is advanced as failed before its task goes, like a
	// worker does before it terminates one.
	if ref, ok := workflow.RefOf(raw.Header, id); ok && b.wf != nil {
		o := workflow.Outcome{State: workflow.Failed, Error: m.Err, Reason: m.Reason}
		if err := b.wf.Finish(ctx, ref, o); err != nil {
			return err
		}
	}
	if err := r.passTurn(ctx, b, raw, log); err != nil {
		return err
	}
	if err := tasks.DeleteMsg(ctx, raw.Sequence); err != nil {
		// Deleting a message that is already gone fails too; that is fine.
		if _, gerr := tasks.GetMsg(ctx, raw.Sequence); !errors.Is(gerr, jetstream.ErrMsgNotFound) {
			return fmt.Errorf("deleting dead task %s (seq %d) from %s: %w", id, raw.Sequence, tasks.CachedInfo().Config.Name, err)
		}
	}
	return nil
}

// passTurn gives up the place in its key's turn that a dead task of an
// ordered or fair key holds (Spool-Order-Seq, limits.Turns.Leave) before
// the task goes, and asks the fleet to release the key's next task with a
// kick request: the worker that would have done it died on the task's last
// delivery. Without it the key would wait for good.
func (r *Router) passTurn(ctx context.Context, b routerBinding, raw *jetstream.RawStreamMsg, log *slog.Logger) error {
	seq, ok := limits.OrderSeq(raw.Header)
	key := raw.Header.Get(spool.HeaderKey)
	if !ok || key == "" || b.turns == nil {
		return nil
	}
	_, typ, err := r.names.ParseTaskSubject(raw.Subject)
	if err != nil {
		return nil // not a task subject: no key of a type to pass on
	}
	held, err := b.turns.Leave(ctx, typ, key, seq)
	if err != nil {
		return fmt.Errorf("passing the turn of key %q of %q on: %w", key, typ, err)
	}
	// Kicked also when the place was given up already: a router that
	// crashed after giving it up may not have kicked.
	if err := r.js.Conn().Publish(r.names.KickSubject(limits.EncodeKey(key), typ), nil); err != nil {
		log.WarnContext(ctx, "dead task's key not started again; the workers' sweep of held keys will", "key", key, "error", err)
	}
	if held {
		log.InfoContext(ctx, "dead task gave up its place in its key's turn", "key", key, "order_seq", seq)
	}
	return nil
}
