package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	spool "github.com/spoolq/spool/shared"
)

// Sections of the contract the cases check, as their headings read.
const (
	secPull      = "How workers pull"
	secWork      = "Working a task"
	secOutput    = "The output, byte for byte"
	secDead      = "Dead letters"
	secResults   = "Results bucket"
	secDiscarded = "Discarded results"
	secUnique    = "Unique keys"
	secCancel    = "Cancelling a task"
	secEvents    = "Events"
	secVerdicts  = "Retry verdicts"
	secTasks     = "Tasks"
	secDelayed   = "Delayed tasks"
	secPause     = "Pausing a task type"
	secFlow      = "Flow control"
	secOrdered   = "Ordered keys and fairness"
	secService   = "The spool-consumer service"
	secWorkflows = "Workflows"
)

// finalAck is the ack that ends a task in each terminal state.
var finalAck = map[spool.State]string{
	spool.StateCompleted: "+ACK",
	spool.StateDead:      "+TERM",
	spool.StateCancelled: "+TERM",
}

// Settled is what the observer saw of a task that ended.
type Settled struct {
	Doc  spool.Result
	Acks []Ack
	Docs []Doc
	Recs []Record
}

// runTask publishes a task of typ at p with a new id of stem and waits
// until it ends in the state want.
func (k *Kit) runTask(ctx context.Context, p spool.Priority, typ, stem string, body []byte, hdr nats.Header, want spool.State) (string, uint64, Settled, error) {
	id := k.id(stem)
	seq, err := k.publish(ctx, p, typ, id, body, hdr)
	if err != nil {
		return id, seq, Settled{}, err
	}
	s, err := k.settled(ctx, id, seq, want)
	return id, seq, s, err
}

// settled waits until task id (stored at seq) is in the terminal state
// want, its document written before the ack or term that ends it, and the
// task gone from the stream.
func (k *Kit) settled(ctx context.Context, id string, seq uint64, want spool.State) (Settled, error) {
	var s Settled
	verb := finalAck[want]
	err := k.obs.wait(ctx, func(recs []Record) error {
		s.Recs = recs
		s.Acks = acksOf(recs, k.names.TaskStream(), seq)
		s.Docs = k.obs.docsOf(recs, id)
		if !slices.ContainsFunc(s.Acks, func(a Ack) bool { return a.Kind() == verb }) {
			return fmt.Errorf("task %s: no %s yet (acks seen: %v; states written: %v)", id, verb, kinds(s.Acks), states(s.Docs))
		}
		return nil
	})
	if err != nil {
		return s, err
	}
	end := s.Acks[slices.IndexFunc(s.Acks, func(a Ack) bool { return a.Kind() == verb })]
	if want != spool.StateCancelled || !k.cancelWritten(s.Docs) {
		// The worker's own final document must come before its ack.
		if !slices.ContainsFunc(s.Docs, func(d Doc) bool { return d.Result.State == want && d.Idx < end.Idx }) {
			return s, fmt.Errorf("task %s: %s sent before a %s result document was written (states written: %v)", id, verb, want, states(s.Docs))
		}
	}
	if err := poll(ctx, 50*time.Millisecond, func() error {
		stored, err := k.taskStored(ctx, seq)
		if err == nil && stored {
			err = fmt.Errorf("task %s is still in %s after %s", id, k.names.TaskStream(), verb)
		}
		return err
	}); err != nil {
		return s, err
	}
	doc, _, found, err := k.doc(ctx, id)
	if err != nil {
		return s, err
	}
	if !found || doc.State != want {
		return s, fmt.Errorf("task %s: stored document is %q, want %s", id, doc.State, want)
	}
	s.Doc = doc
	return s, checkDoc(doc, id)
}

// cancelWritten reports whether the kit's canceller wrote the cancelled
// document, so the worker had none of its own to write.
func (k *Kit) cancelWritten(docs []Doc) bool {
	return slices.ContainsFunc(docs, func(d Doc) bool {
		return d.Result.State == spool.StateCancelled && d.Result.Worker == ""
	})
}

// checkDoc checks the fields a result document always carries.
func checkDoc(d spool.Result, id string) error {
	var bad []string
	if d.ID != id {
		bad = append(bad, fmt.Sprintf("id %q", d.ID))
	}
	if spool.ValidateType(d.Type) != nil {
		bad = append(bad, fmt.Sprintf("type %q", d.Type))
	}
	if !d.Priority.Valid() {
		bad = append(bad, fmt.Sprintf("priority %d", d.Priority))
	}
	if d.EnqueuedAt.IsZero() {
		bad = append(bad, "no enqueued_at")
	}
	if (d.State == spool.StateCompleted || d.State == spool.StateDead) && d.FinishedAt == nil {
		bad = append(bad, "no finished_at")
	}
	if len(bad) > 0 {
		return fmt.Errorf("result document of %s: %s", id, strings.Join(bad, ", "))
	}
	return nil
}

// states lists the states written, in order.
func states(docs []Doc) []string {
	out := make([]string, len(docs))
	for i, d := range docs {
		out[i] = string(d.Result.State)
		if d.Op != "" {
			out[i] = d.Op
		}
	}
	return out
}

// header builds task headers from name, value pairs.
func header(kv ...string) nats.Header {
	h := nats.Header{}
	for i := 0; i+1 < len(kv); i += 2 {
		h.Set(kv[i], kv[i+1])
	}
	return h
}
