package consumer

import (
	"context"
	"errors"
	"time"

	"github.com/spoolq/spool/consumer/parking"
	spool "github.com/spoolq/spool/shared"
)

// parkRetry is the delay of a task of a paused type handed back as a
// schedule when the task stream has no parked subjects (provisioned before
// type pauses): it comes back after about that long, and is handed back
// again while its type stays paused.
const parkRetry = 5 * time.Second

// startParking binds the type-pause bucket and starts the worker's share of
// moving parked tasks back. A deployment provisioned before type pauses has
// no bucket: the worker then runs without them.
func (w *Worker) startParking(ctx context.Context) error {
	// Parked tasks live in SPOOL_TASKS (w.tasks) whatever partitions the
	// worker pulls (they go back through the server's mapping to their
	// partition).
	p, err := parking.New(ctx, parking.Config{
		JS: w.js, Conn: w.nc, Tasks: w.tasks, Names: w.o.Names,
		IOTimeout: w.o.IOTimeout, Logger: w.log,
	})
	if errors.Is(err, parking.ErrNotProvisioned) {
		w.log.WarnContext(ctx, "type pauses off: provision the topology again to create their bucket", "error", err)
		return nil
	}
	if err != nil {
		return err
	}
	if !p.CanPark() {
		w.log.WarnContext(ctx, "the task stream has no parked subjects: tasks of a paused type are handed back as schedules until it is provisioned again",
			"subject", w.o.Names.ParkedFilter())
	}
	w.parking = p
	return nil
}

// park sets a task of a paused type aside without running it and without
// spending an attempt: a copy on its parked subject carrying the attempts
// used so far, then the delivered message acked (see package parking). A
// crash between the two leaves both (the task runs twice, at least once);
// a park that cannot be stored NAKs the task for a later look, which
// costs a delivery.
func (w *Worker) park(a attemptInfo, meta spool.Meta) {
	if !w.parking.CanPark() {
		w.deferTask(a, meta, jitter(parkRetry, deferJitter))
		return
	}
	err := w.settleWrite(a, "parking task "+a.id, func(ctx context.Context) error {
		return w.parking.Park(ctx, a.msg, a.p, a.typ, a.id, a.seq, a.attempt-1)
	})
	if err != nil {
		w.log.Warn("parking a task of a paused type failed; it comes back after a NAK delay", "task_id", a.id, "type", a.typ, "error", err)
		w.nak(a, parkRetry)
		return
	}
	if err := a.msg.Ack(); err != nil {
		w.log.Warn("acking a parked task", "task_id", a.id, "error", err)
	}
	w.log.Debug("task parked: its type is paused", "task_id", a.id, "type", a.typ, "priority", a.p.String())
}
