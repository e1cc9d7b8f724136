package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/spoolq/spool/consumer"
	spool "github.com/spoolq/spool/shared"
)

// fleetWorkerName names the kit's own Go worker in the fleet case.
const fleetWorkerName = "conformance-kit-fleet"

// fleetCases are the core cases that need a second worker.
func fleetCases() []Case {
	return []Case{
		{Name: "core/fleet", Level: Core, Section: secPull, Run: caseFleet, Consumers: "type"},
		{Name: "core/unserved-stays-queued", Level: Core, Section: secPull, Run: caseUnserved, Consumers: "type"},
		{Name: "core/no-handler", Level: Core, Section: secPull, Run: caseNoHandler, Consumers: "priority"},
	}
}

// caseFleet: beside a Go worker serving another type, each worker runs only
// its own types and nothing is dead-lettered for want of a handler.
func caseFleet(ctx context.Context, k *Kit) error {
	stop, err := k.startFleetWorker(ctx)
	if err != nil {
		return err
	}
	defer stop()
	type task struct {
		id, typ string
		seq     uint64
	}
	var tasks []task
	for i := range 8 {
		typ := TypeEcho
		if i%2 == 1 {
			typ = TypeOther
		}
		id := k.id("fleet")
		seq, err := k.publish(ctx, spool.Normal, typ, id, []byte(`{}`), nil)
		if err != nil {
			return err
		}
		tasks = append(tasks, task{id, typ, seq})
	}
	for _, t := range tasks {
		s, err := k.settled(ctx, t.id, t.seq, spool.StateCompleted)
		if err != nil {
			return err
		}
		mine := s.Doc.Worker == fleetWorkerName
		if mine != (t.typ == TypeOther) {
			return fmt.Errorf("task %s of %s completed by worker %q", t.id, t.typ, s.Doc.Worker)
		}
	}
	recs, _ := k.obs.snapshot()
	for _, r := range recs {
		if strings.HasPrefix(r.Subject, k.names.Prefix()+".dlq.") && r.Header.Get(spool.HeaderReason) == string(spool.ReasonNoHandler) {
			return fmt.Errorf("dead letter no_handler of %s on %s", r.Header.Get(spool.HeaderTaskID), r.Subject)
		}
	}
	return nil
}

// caseUnserved: a type no worker serves waits in the queue, undelivered.
func caseUnserved(ctx context.Context, k *Kit) error {
	id := k.id("unserved")
	seq, err := k.publish(ctx, spool.Normal, TypeUnserved, id, []byte(`{}`), nil)
	if err != nil {
		return err
	}
	// A task published after it and completed shows the worker pulled.
	after := k.id("after")
	aseq, err := k.publish(ctx, spool.Normal, TypeEcho, after, []byte(`{}`), nil)
	if err != nil {
		return err
	}
	if _, err := k.settled(ctx, after, aseq, spool.StateCompleted); err != nil {
		return err
	}
	stored, err := k.taskStored(ctx, seq)
	if err != nil {
		return err
	}
	if !stored {
		return fmt.Errorf("task %s of %s, a type no worker serves, left the queue", id, TypeUnserved)
	}
	if _, _, found, err := k.doc(ctx, id); err != nil || found {
		return fmt.Errorf("task %s of %s, a type no worker serves, has a result document (%v)", id, TypeUnserved, err)
	}
	recs, _ := k.obs.snapshot()
	if a := acksOf(recs, k.names.TaskStream(), seq); len(a) > 0 {
		return fmt.Errorf("task %s of %s was delivered (acks: %v)", id, TypeUnserved, kinds(a))
	}
	return nil
}

// caseNoHandler: pulling by priority, a task of a type the worker has no
// handler for is dead-lettered with no_handler.
func caseNoHandler(ctx context.Context, k *Kit) error {
	id, seq, s, err := k.runTask(ctx, spool.Normal, TypeUnserved, "nohandler", []byte(`{}`), nil, spool.StateDead)
	if err != nil {
		return err
	}
	if s.Doc.Reason != spool.ReasonNoHandler {
		return fmt.Errorf("dead with reason %q, want no_handler", s.Doc.Reason)
	}
	return k.checkDeadLetter(ctx, s, id, seq, spool.Normal, TypeUnserved, []byte(`{}`), spool.ReasonNoHandler, 1, nil)
}

// startFleetWorker runs the kit's own Go worker serving TypeOther on its
// own connection; stop stops it.
func (k *Kit) startFleetWorker(ctx context.Context) (stop func(), err error) {
	nc, err := nats.Connect(k.srv.URL, nats.Name(fleetWorkerName))
	if err != nil {
		return nil, err
	}
	mux := consumer.NewMux()
	mux.HandleFunc(TypeOther, func(_ context.Context, t *consumer.Task) ([]byte, error) { return t.Payload, nil })
	w, err := consumer.New(nc, mux, consumer.WithWorkerName(fleetWorkerName), consumer.WithLogger(k.logger))
	if err != nil {
		nc.Close()
		return nil, err
	}
	if err := w.Start(ctx); err != nil {
		nc.Close()
		return nil, fmt.Errorf("starting the kit's fleet worker: %w", err)
	}
	return func() {
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := w.Stop(sctx); err != nil {
			k.logger.Warn("stopping the kit's fleet worker", "err", err)
		}
		nc.Close()
	}, nil
}
