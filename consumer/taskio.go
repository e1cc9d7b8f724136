package consumer

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	spool "github.com/spoolq/spool/shared"
	"github.com/spoolq/spool/shared/jsproto"
)

// taskIO is what every stage of an attempt and every feature uses to act
// on a delivered task: writes that ride out an election, NAKs, heartbeats
// and hand-backs. It holds no state of its own beyond the worker's
// settings.
type taskIO struct {
	js    jetstream.JetStream
	names spool.Names
	log   *slog.Logger
	rec   *recorder
	// ctx carries Start's values and is never cancelled.
	ctx       context.Context
	ackWait   [numPriorities]time.Duration
	ioTimeout time.Duration
	perTry    time.Duration
}

// retryBudget is how long a settling write of a task of priority p keeps
// trying.
func (x *taskIO) retryBudget(p spool.Priority) time.Duration {
	return retryBudget(x.ackWait[p], x.ioTimeout)
}

// write runs a settling write of attempt a (a result, a dead letter)
// through an election: each try bounded by the per-try timeout, retried
// while 3/4 of the task's AckWait from now allows, the task heartbeated
// meanwhile so that it stays ours. Each retry counts in WriteRetries. The
// outcome it writes is computed once, by the caller.
func (x *taskIO) write(a attemptInfo, what string, fn func(ctx context.Context) error) error {
	ctx, cancel := context.WithTimeout(x.ctx, x.retryBudget(a.p))
	defer cancel()
	beat := a.beat
	if beat.IsZero() {
		beat = time.Now()
	}
	r := jsproto.Tries{PerTry: x.perTry, OnRetry: func(err error) {
		x.rec.writeRetry(a.p, a.typ)
		x.log.Debug("settling write sent again", "task_id", a.id, "write", what, "error", err)
		if time.Since(beat) >= x.ackWait[a.p]/4 {
			beat = time.Now()
			if err := a.msg.InProgress(); err != nil {
				x.log.Warn("heartbeat of a task awaiting its settling write failed", "task_id", a.id, "error", err)
			}
		}
	}}
	return r.Do(ctx, what, fn)
}

// nak hands the task back to JetStream for a redelivery after delay.
func (x *taskIO) nak(a attemptInfo, delay time.Duration) {
	if err := a.msg.NakWithDelay(delay); err != nil {
		x.log.Warn("nak failed; the task returns after AckWait", "task_id", a.id, "error", err)
	}
}

// beatWhile heartbeats a's task every interval from its last heartbeat
// (a.beat) until ctx ends or the returned stop is called; stop returns the
// time of the last heartbeat. what names the task in a failed
// heartbeat's log line.
func beatWhile(ctx context.Context, a attemptInfo, every time.Duration, log *slog.Logger, what string) (stop func() time.Time) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	last := a.beat
	if every <= 0 {
		every = time.Second // AckWait unknown
	}
	go func() {
		defer close(done)
		t := time.NewTimer(time.Until(last.Add(every)))
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				if err := a.msg.InProgress(); err != nil {
					log.Warn("heartbeat of "+what+" failed", "task_id", a.id, "error", err)
				}
				last = time.Now()
				t.Reset(every)
			}
		}
	}()
	return func() time.Time { cancel(); <-done; return last }
}

// admitTimeout bounds a check before the handler runs. Nothing heartbeats
// the task then, so the check must end well within the ack wait, or the
// task would be delivered again meanwhile.
func (x *taskIO) admitTimeout(p spool.Priority) time.Duration {
	admit := x.ioTimeout
	if aw := x.ackWait[p]; aw > 0 {
		admit = min(admit, aw/3)
	}
	return admit
}

// A task handed back by a limit that booked its return (a rate limit)
// comes back deferEarly before the booked time (at least deferBase from
// now). Else the delay grows with its hand-backs,
// min(deferBase·2^deferrals, deferMax) plus up to half of it again.
const (
	deferBase   = 100 * time.Millisecond
	deferMax    = 5 * time.Second
	deferJitter = 0.5
	deferEarly  = 300 * time.Millisecond
)

// deferDelay is the hand-back delay of a task handed back deferrals times
// before.
func deferDelay(deferrals int) time.Duration {
	return jitter(backoff(deferBase, deferMax, deferrals+1), deferJitter)
}

// handBack hands a task back for delay without spending a delivery: it
// publishes a copy as a one-shot schedule on the task's schedule subject,
// carrying the attempts used so far (Spool-Prior-Attempts) and the count
// of hand-backs (Spool-Deferrals), and then acks the delivered message.
// The copy fires onto the task's own subject after delay, behind the tasks
// queued meanwhile, so a waiting task never blocks other types or keys. A
// crash between the publish and the ack runs the task twice. If the
// publish fails the task is NAKed with the delay instead, which costs one
// delivery.
func (x *taskIO) handBack(a attemptInfo, meta spool.Meta, delay time.Duration) {
	h := handBackHeader(a, meta)
	h.Set(spool.HeaderDeferrals, strconv.Itoa(meta.Deferrals+1))
	h.Set(spool.HeaderSchedule, spool.FormatScheduleAt(time.Now().Add(delay)))
	h.Set(spool.HeaderScheduleTarget, a.msg.Subject())
	h.Set(spool.HeaderMsgID, fmt.Sprintf("%s-flow-%d", a.id, a.seq))
	subj, err := x.names.SchedSubject(a.id)
	if err == nil {
		// Nats-Msg-Id makes a retried publish store one copy.
		m := &nats.Msg{Subject: subj, Header: h, Data: a.msg.Data()}
		err = x.write(a, "hand-back for flow control", func(ctx context.Context) error {
			_, err := x.js.PublishMsg(ctx, m)
			return err
		})
	}
	if err != nil {
		x.log.Warn("handing a limited task back failed; it returns after a NAK delay", "task_id", a.id, "error", err)
		x.nak(a, delay)
		return
	}
	if err := a.msg.Ack(); err != nil {
		x.log.Warn("acking a task handed back for flow control", "task_id", a.id, "error", err)
	}
	x.log.Debug("task handed back: flow-control limit full", "task_id", a.id, "type", a.typ, "delay", delay)
}

// handBackHeader is the header of a copy of the task that a worker
// republishes (a hand-back, a park): the task's own headers without
// JetStream's, its id, the attempts it used so far
// (Spool-Prior-Attempts), so the copy costs none of its retries, and its
// first enqueue time (Spool-Enqueued-At), so the copy keeps it.
func handBackHeader(a attemptInfo, meta spool.Meta) nats.Header {
	h := nats.Header{}
	for k, vs := range a.msg.Headers() {
		if lk := strings.ToLower(k); strings.HasPrefix(lk, "nats-") ||
			lk == strings.ToLower(spool.HeaderPriorAttempts) || lk == strings.ToLower(spool.HeaderDeferrals) ||
			lk == strings.ToLower(spool.HeaderSlot) {
			continue
		}
		h[k] = vs
	}
	h.Set(spool.HeaderTaskID, a.id)
	h.Set(spool.HeaderPriorAttempts, strconv.Itoa(a.attempt-1))
	spool.KeepEnqueuedAt(h, a.enq)
	if meta.Deferrals > 0 {
		h.Set(spool.HeaderDeferrals, strconv.Itoa(meta.Deferrals))
	}
	return h
}
