package workflow

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	spool "github.com/spoolq/spool/shared"
)

// Outcome is how a step ended.
type Outcome struct {
	// State is Completed, Failed or Cancelled.
	State State
	// Error and Reason describe a failure (the task's error and
	// dead-letter reason).
	Error  string
	Reason spool.Reason
}

// Action is what a worker does with a step's task it just received.
type Action int

// Actions of Begin.
const (
	// Run the handler, then Finish with its outcome.
	Run Action = iota
	// Finish with the returned outcome without running the handler: the
	// step's result is stored already (a crash came between storing it
	// and acking the task), or the workflow stopped or was cancelled.
	FinishOnly
	// Drop the task unrun: it is a stale run of the step (a retry started
	// a newer one), or its workflow is gone.
	Drop
)

// Begin tells the worker that received a step's task what to do with it.
func (s *Store) Begin(ctx context.Context, ref Ref) (Action, Outcome, error) {
	doc, ok, err := s.result(ctx, ref.TaskID)
	if err != nil {
		return 0, Outcome{}, err
	}
	if ok && doc.State.Terminal() {
		return FinishOnly, outcomeOf(doc), nil
	}
	var sr StepRecord
	_, ok, err = s.get(ctx, stepKey(ref.Workflow, ref.Step), &sr)
	if err != nil {
		return 0, Outcome{}, err
	}
	if !ok || sr.TaskID != ref.TaskID || sr.State.Terminal() {
		return Drop, Outcome{}, nil
	}
	var r Record
	_, ok, err = s.get(ctx, recordKey(ref.Workflow), &r)
	if err != nil {
		return 0, Outcome{}, err
	}
	if !ok {
		return Drop, Outcome{}, nil
	}
	onFailure := sr.Index == r.Steps
	if r.Cancelled || r.Stopped && !onFailure {
		return FinishOnly, Outcome{State: Cancelled}, nil
	}
	return Run, Outcome{}, nil
}

func outcomeOf(doc spool.Result) Outcome {
	if doc.State == spool.StateCompleted {
		return Outcome{State: Completed}
	}
	return Outcome{State: Failed, Error: doc.Error, Reason: doc.Reason}
}

// finishing is a step to settle in Finish's work list; taskID "" is a
// cancellation that applies only to a pending step.
type finishing struct {
	name   string
	taskID string
	o      Outcome
}

// Finish records a step's outcome and advances its workflow: the step's
// bit in the workflow record, its dependants' counts, the dependants that
// became ready (enqueued, or cancelled when an input did not complete or
// the workflow stopped), the on-failure step, and the workflow's final
// state. It is idempotent: called again for the same task, it redoes only
// what is missing. The worker calls it after the step's result is stored
// and before its task is acked.
func (s *Store) Finish(ctx context.Context, ref Ref, o Outcome) error {
	work := []finishing{{name: ref.Step, taskID: ref.TaskID, o: o}}
	for len(work) > 0 {
		f := work[len(work)-1]
		work = work[:len(work)-1]
		more, err := s.finishOne(ctx, ref.Workflow, f)
		if err != nil {
			return fmt.Errorf("advancing workflow %q after step %q: %w", ref.Workflow, f.name, err)
		}
		work = append(work, more...)
	}
	return nil
}

func (s *Store) finishOne(ctx context.Context, id string, f finishing) ([]finishing, error) {
	stale := false
	sr, err := s.modifyStep(ctx, id, f.name, func(r *StepRecord) bool {
		switch {
		case f.taskID != "" && r.TaskID != f.taskID:
			stale = true
			return false
		case r.State.Terminal():
			return false // finished before: redo the rest
		case f.taskID == "" && r.State != Pending:
			stale = true // queued: it settles when its task does
			return false
		}
		r.State, r.Error = f.o.State, f.o.Error
		return true
	})
	if err != nil || stale {
		return nil, err
	}
	state := sr.State
	// ready marks the dependants whose count this change brought to zero:
	// this finisher enqueues them. A redo (the bit was set before: a
	// crash came after the record was written) enqueues every dependant
	// at zero, which enqueue makes idempotent. Reset on every try of the
	// compare-and-set.
	var ready map[string]bool
	redo := false
	rec, err := s.changeRecord(ctx, id, func(r *Record) bool {
		ready, redo = nil, false
		if sr.Index == r.Steps { // the on-failure step
			if r.OnFailureDone {
				return false
			}
			r.OnFailureDone = true
			r.settle()
			return true
		}
		if r.Done.has(sr.Index) {
			redo = true
			return false
		}
		r.Done.set(sr.Index)
		if state != Completed {
			r.NotOK.set(sr.Index)
		}
		if state == Failed {
			if r.Failure == nil {
				r.Failure = &Failure{Step: sr.Name, TaskID: sr.TaskID, Error: sr.Error, Reason: string(f.o.Reason)}
			}
			if r.Policy == Stop {
				r.Stopped = true
			}
		}
		for _, d := range sr.Next {
			if w := r.Waiting[d]; w != nil {
				w.Left--
				if state != Completed {
					w.Bad++
				}
				if w.Left == 0 {
					if ready == nil {
						ready = map[string]bool{}
					}
					ready[d] = true
				}
			}
		}
		r.settle()
		return true
	})
	if err != nil {
		return nil, err
	}
	var more []finishing
	if state == Failed && rec.OnFailure != "" && rec.Failure != nil && rec.Failure.Step == sr.Name && !rec.Cancelled {
		m, err := s.enqueue(ctx, rec, rec.OnFailure)
		if err != nil {
			return nil, err
		}
		more = append(more, m...)
	}
	for _, d := range sr.Next {
		w := rec.Waiting[d]
		if w == nil || w.Left > 0 || !redo && !ready[d] {
			continue
		}
		if w.Bad > 0 || rec.Stopped || rec.Cancelled {
			more = append(more, finishing{name: d, o: Outcome{State: Cancelled}})
			continue
		}
		m, err := s.enqueue(ctx, rec, d)
		if err != nil {
			return nil, err
		}
		more = append(more, m...)
	}
	return more, nil
}

// settle sets the final state once every step is terminal (and the
// on-failure step, when one was enqueued).
func (r *Record) settle() {
	if r.State != Running || r.Done.count() < r.Steps {
		return
	}
	if r.Failure != nil && r.OnFailure != "" && !r.OnFailureDone && !r.Cancelled {
		return
	}
	now := time.Now().UTC()
	r.FinishedAt = &now
	switch {
	case r.Cancelled:
		r.State = Cancelled
	case r.NotOK.count() > 0:
		r.State = Failed
	default:
		r.State = Completed
	}
}

// enqueue publishes the task of a ready step (pending → queued), or again
// when the step is queued already (a crash may have come between the two:
// the task id, its Nats-Msg-Id, makes the second copy a duplicate). A step
// whose task cannot be built (its inputs make it too large) is returned to
// be finished as failed.
func (s *Store) enqueue(ctx context.Context, rec *Record, name string) ([]finishing, error) {
	var sr StepRecord
	_, ok, err := s.get(ctx, stepKey(rec.ID, name), &sr)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, fmt.Errorf("%w: step %q of workflow %q", ErrNotFound, name, rec.ID)
	}
	if sr.State != Pending && sr.State != Queued {
		return nil, nil
	}
	msg, err := s.stepMsg(ctx, rec, &sr)
	if errors.Is(err, errTooLarge) {
		return []finishing{{name: name, taskID: sr.TaskID, o: Outcome{State: Failed, Error: err.Error()}}}, nil
	}
	if err != nil {
		return nil, err
	}
	if sr.State == Pending {
		lost := false
		_, err := s.modifyStep(ctx, rec.ID, name, func(r *StepRecord) bool {
			if r.State != Pending || r.TaskID != sr.TaskID {
				lost = r.State != Queued || r.TaskID != sr.TaskID
				return false
			}
			r.State = Queued
			return true
		})
		if err != nil || lost {
			return nil, err
		}
	}
	err = s.retry(ctx, func(ctx context.Context) error {
		_, err := s.js.PublishMsg(ctx, msg)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("enqueueing step %q (task %s): %w", name, sr.TaskID, err)
	}
	return nil, nil
}

var errTooLarge = errors.New("step task too large")

// stepMsg builds the task of a step: its payload, or the StepInput
// document when it takes inputs or is the on-failure step.
func (s *Store) stepMsg(ctx context.Context, rec *Record, sr *StepRecord) (*nats.Msg, error) {
	subj, err := s.names.TaskSubject(sr.Priority, sr.Type)
	if err != nil {
		return nil, err
	}
	data := sr.Payload
	onFailure := sr.Index == rec.Steps
	if sr.Inputs || onFailure {
		var in StepInput
		in.Payload, in.PayloadEncoding = spool.ResultValue(sr.Payload)
		if onFailure {
			in.Failed = rec.Failure
		}
		if sr.Inputs {
			in.Inputs = make([]json.RawMessage, len(sr.After))
			err := forEach(ctx, len(sr.After), func(ctx context.Context, i int) (err error) {
				in.Inputs[i], err = s.output(ctx, rec.ID, sr.After[i])
				return err
			})
			if err != nil {
				return nil, err
			}
		}
		if data, err = json.Marshal(in); err != nil {
			return nil, fmt.Errorf("encoding the input of step %q: %w", sr.Name, err)
		}
	}
	msg := nats.NewMsg(subj)
	msg.Data = data
	if err := (spool.Meta{ID: sr.TaskID, MaxRetries: sr.MaxRetries, Timeout: sr.Timeout}).Encode(msg.Header); err != nil {
		return nil, fmt.Errorf("step %q: %w", sr.Name, err)
	}
	msg.Header.Set(HeaderWorkflow, rec.ID)
	msg.Header.Set(HeaderStep, sr.Name)
	if err := spool.ValidateMsgSize(msg, s.maxMsg); err != nil {
		return nil, fmt.Errorf("%w: step %q with its inputs: %w", errTooLarge, sr.Name, err)
	}
	return msg, nil
}

// output is a step's result, JSON null when it has none.
func (s *Store) output(ctx context.Context, id, name string) (json.RawMessage, error) {
	var sr StepRecord
	_, ok, err := s.get(ctx, stepKey(id, name), &sr)
	if err != nil || !ok || sr.State != Completed {
		return json.RawMessage("null"), err
	}
	doc, ok, err := s.result(ctx, sr.TaskID)
	if err != nil || !ok || len(doc.Result) == 0 {
		return json.RawMessage("null"), err
	}
	return doc.Result, nil
}

// publishCreates writes new keys in bulk, each as a create (expected last
// subject sequence 0); a key that exists already is left as it is.
func (s *Store) publishCreates(ctx context.Context, keys []string, values [][]byte) error {
	prefix := "$KV." + s.names.WorkflowsBucket() + "."
	const window = 256
	for start := 0; start < len(keys); start += window {
		end := min(start+window, len(keys))
		futs := make([]jetstream.PubAckFuture, 0, end-start)
		for i := start; i < end; i++ {
			f, err := s.js.PublishAsync(prefix+keys[i], values[i], jetstream.WithExpectLastSequencePerSubject(0))
			if err != nil {
				return fmt.Errorf("writing %s: %w", keys[i], err)
			}
			futs = append(futs, f)
		}
		for i, f := range futs {
			var err error
			select {
			case <-f.Ok():
			case err = <-f.Err():
			case <-ctx.Done():
				return ctx.Err()
			}
			if err == nil || isWrongSeq(err) {
				continue
			}
			// A lost acknowledgement: write the key alone, with retries.
			key := keys[start+i]
			err = s.retry(ctx, func(ctx context.Context) error {
				_, err := s.kv.Create(ctx, key, values[start+i])
				return err
			})
			if err != nil && !errors.Is(err, jetstream.ErrKeyExists) {
				return fmt.Errorf("writing %s: %w", key, err)
			}
		}
	}
	return nil
}
