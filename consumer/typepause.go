package consumer

import (
	"context"
	"errors"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/spoolq/spool/consumer/parking"
	spool "github.com/spoolq/spool/shared"
)

// parkRetry is the delay of a task of a paused type handed back as a
// schedule when the task stream has no parked subjects (provisioned before
// type pauses): it comes back after about that long, and is handed back
// again while its type stays paused.
const parkRetry = 5 * time.Second

// pauses is the gate of type pauses: a task of a paused type is parked,
// unrun and uncounted, and every worker moves parked tasks of resumed
// types back (package parking). A nil parking means type pauses are off.
type pauses struct {
	io      *taskIO
	parking *parking.Parking
	cancels *cancels
}

// startPauses binds the type-pause bucket and starts the worker's share of
// moving parked tasks back. A deployment provisioned before type pauses has
// no bucket: the worker then runs without them.
func startPauses(ctx context.Context, io *taskIO, nc *nats.Conn, tasks jetstream.Stream, cancels *cancels) (*pauses, error) {
	g := &pauses{io: io, cancels: cancels}
	// Parked tasks live in SPOOL_TASKS whatever partitions the worker
	// pulls: they go back through the server's mapping to their partition.
	p, err := parking.New(ctx, parking.Config{
		JS: io.js, Conn: nc, Tasks: tasks, Names: io.names,
		IOTimeout: io.ioTimeout, Logger: io.log,
	})
	if errors.Is(err, parking.ErrNotProvisioned) {
		io.log.WarnContext(ctx, "type pauses off: provision the topology again to create their bucket", "error", err)
		return g, nil
	}
	if err != nil {
		return nil, err
	}
	if !p.CanPark() {
		io.log.WarnContext(ctx, "the task stream has no parked subjects: tasks of a paused type are handed back as schedules until it is provisioned again",
			"subject", io.names.ParkedFilter())
	}
	g.parking = p
	return g, nil
}

func (g *pauses) close() {
	if g != nil {
		g.parking.Close()
	}
}

// admit parks a task of a paused type, unless it was cancelled: admission
// settles that one at once.
func (g *pauses) admit(a *attemptInfo, meta spool.Meta) (bool, error) {
	if !g.parking.Paused(a.typ) || g.cancels.cancelled(a.id) {
		return true, nil
	}
	g.park(*a, meta)
	return false, nil
}

// park sets a task of a paused type aside without running it and without
// spending an attempt: a copy on its parked subject carrying the attempts
// used so far, then the delivered message acked (see package parking). A
// crash between the two leaves both, and the task runs twice; a park that
// cannot be stored NAKs the task for a later look, which costs a delivery.
func (g *pauses) park(a attemptInfo, meta spool.Meta) {
	if !g.parking.CanPark() {
		g.io.handBack(a, meta, jitter(parkRetry, deferJitter))
		return
	}
	err := g.io.write(a, "parking task "+a.id, func(ctx context.Context) error {
		return g.parking.Park(ctx, a.msg, a.p, a.typ, a.id, a.seq, a.attempt-1)
	})
	if err != nil {
		g.io.log.Warn("parking a task of a paused type failed; it comes back after a NAK delay", "task_id", a.id, "type", a.typ, "error", err)
		g.io.nak(a, parkRetry)
		return
	}
	if err := a.msg.Ack(); err != nil {
		g.io.log.Warn("acking a parked task", "task_id", a.id, "error", err)
	}
	g.io.log.Debug("task parked: its type is paused", "task_id", a.id, "type", a.typ, "priority", a.p.String())
}
