package workflow

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	spool "github.com/spoolq/spool/shared"
)

// Submit validates doc, stores the workflow and enqueues the steps that
// wait for nothing, and returns the workflow id (doc.ID, or a new one). An
// invalid document is refused (ErrInvalid) before anything is stored; an id
// submitted before is refused with ErrExists.
func (s *Store) Submit(ctx context.Context, doc Doc) (string, error) {
	return s.submit(ctx, doc, false)
}

// SubmitAgain is Submit for a redelivered submission (the reserved task
// type): a workflow the same submission stored already is completed, not
// refused.
func (s *Store) SubmitAgain(ctx context.Context, doc Doc) (string, error) {
	return s.submit(ctx, doc, true)
}

func (s *Store) submit(ctx context.Context, doc Doc, again bool) (string, error) {
	if err := doc.Validate(); err != nil {
		return "", err
	}
	if doc.ID == "" {
		doc.ID = spool.NewID()
	}
	id := doc.ID
	var existing Record
	_, found, err := s.get(ctx, recordKey(id), &existing)
	if err != nil {
		return "", err
	}
	if found && !again {
		return "", fmt.Errorf("%w: %q", ErrExists, id)
	}
	policy := doc.OnError
	if policy == "" {
		policy = Stop
	}
	n := len(doc.Steps)
	all := doc.Steps
	if doc.OnFailure != nil {
		all = append(all[:n:n], *doc.OnFailure)
	}
	next := make(map[string][]string, n)
	for _, st := range doc.Steps {
		for _, dep := range st.After {
			next[dep] = append(next[dep], st.Name)
		}
	}
	now := time.Now().UTC()
	keys := make([]string, len(all))
	values := make([][]byte, len(all))
	for i, st := range all {
		r := StepRecord{Step: st, StepState: StepState{Index: i, Next: next[st.Name], State: Pending,
			TaskID: StepTaskID(id, st.Name, 0), UpdatedAt: now}}
		b, err := json.Marshal(r)
		if err != nil {
			return "", fmt.Errorf("encoding step %q: %w", st.Name, err)
		}
		if len(b) > MaxStepBytes {
			return "", fmt.Errorf("%w: step %q is %d bytes stored, at most %d", ErrInvalid, st.Name, len(b), MaxStepBytes)
		}
		keys[i], values[i] = stepKey(id, st.Name), b
	}
	if err := s.publishCreates(ctx, keys, values); err != nil {
		return "", fmt.Errorf("storing workflow %q: %w", id, err)
	}
	rec := Record{ID: id, Version: Version, Policy: policy, State: Running, Steps: n,
		Done: newBitmap(n + 1), NotOK: newBitmap(n + 1), Waiting: map[string]*Wait{}, SubmittedAt: now}
	if doc.OnFailure != nil {
		rec.OnFailure = doc.OnFailure.Name
	}
	for _, st := range doc.Steps {
		if len(st.After) > 0 {
			rec.Waiting[st.Name] = &Wait{Left: len(st.After)}
		}
	}
	if !found {
		err = s.update(ctx, recordKey(id), &rec, 0)
		if errors.Is(err, errConflict) && !again {
			return "", fmt.Errorf("%w: %q", ErrExists, id)
		}
		if err != nil && !errors.Is(err, errConflict) {
			return "", fmt.Errorf("storing workflow %q: %w", id, err)
		}
		if _, _, err = s.get(ctx, recordKey(id), &rec); err != nil {
			return "", err
		}
	} else {
		rec = existing
	}
	var roots []string
	for _, st := range doc.Steps {
		if len(st.After) == 0 {
			roots = append(roots, st.Name)
		}
	}
	// The roots of a large group are many: enqueue them side by side.
	err = forEach(ctx, len(roots), func(ctx context.Context, i int) error {
		_, err := s.enqueue(ctx, &rec, roots[i])
		return err
	})
	if err != nil {
		return id, err
	}
	return id, nil
}

// Get returns the workflow record of id.
func (s *Store) Get(ctx context.Context, id string) (Record, error) {
	var r Record
	_, ok, err := s.get(ctx, recordKey(id), &r)
	if err == nil && !ok {
		err = fmt.Errorf("%w: %q", ErrNotFound, id)
	}
	return r, err
}

// Status returns the workflow's state and each step's, with the task's
// result document of every step that was enqueued (attempts, result,
// error, processing or retrying).
func (s *Store) Status(ctx context.Context, id string) (Status, error) {
	r, err := s.Get(ctx, id)
	if err != nil {
		return Status{}, err
	}
	steps, err := s.steps(ctx, r)
	if err != nil {
		return Status{}, err
	}
	st := Status{Summary: r.summary(), Policy: r.Policy, Retries: r.Retries, Steps: make([]StepStatus, len(steps))}
	for i, sr := range steps {
		st.Steps[i] = StepStatus{Name: sr.Name, Type: sr.Type, After: sr.After, State: sr.State, Run: sr.Run,
			Error: sr.Error, OnFailure: sr.Index == r.Steps}
		if sr.State != Pending {
			st.Steps[i].TaskID = sr.TaskID
		}
	}
	err = forEach(ctx, len(steps), func(ctx context.Context, i int) error {
		ss := &st.Steps[i]
		if ss.TaskID == "" {
			return nil
		}
		doc, ok, err := s.result(ctx, ss.TaskID)
		if ok {
			ss.Task = &doc
		}
		return err
	})
	if err != nil {
		return Status{}, err
	}
	return st, nil
}

// List returns every workflow's summary, newest first.
func (s *Store) List(ctx context.Context) ([]Summary, error) {
	var keys []string
	err := s.retryFor(ctx, 5*s.try, func(ctx context.Context) error {
		keys = keys[:0]
		l, err := s.kv.ListKeysFiltered(ctx, recordsFilter)
		if errors.Is(err, jetstream.ErrNoKeysFound) {
			return nil
		}
		if err != nil {
			return err
		}
		for k := range l.Keys() {
			keys = append(keys, k)
		}
		// The lister has stopped itself once Keys is drained: Stop
		// would only report that.
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("listing workflows: %w", err)
	}
	out := make([]Summary, 0, len(keys))
	for _, k := range keys {
		var r Record
		_, ok, err := s.get(ctx, k, &r)
		if err != nil {
			return nil, err
		}
		if ok {
			out = append(out, r.summary())
		}
	}
	slices.SortFunc(out, func(a, b Summary) int { return b.SubmittedAt.Compare(a.SubmittedAt) })
	return out, nil
}

// Wait returns the workflow record once its state is final, or ctx's
// error. It watches the record (its current value, then each update); a
// watch that goes quiet for a while (lost in a leader change) is made
// again.
func (s *Store) Wait(ctx context.Context, id string) (Record, error) {
	r, err := s.Get(ctx, id)
	if err != nil || r.State.Terminal() {
		return r, err
	}
	for {
		done, err := s.watchRecord(ctx, id, &r)
		if done || err != nil {
			return r, err
		}
	}
}

// watchRecord watches the record of id for up to a few request timeouts
// and reports whether it reached a final state (stored in r).
func (s *Store) watchRecord(ctx context.Context, id string, r *Record) (bool, error) {
	wctx, cancel := context.WithTimeout(ctx, 5*s.try)
	defer cancel()
	w, err := s.kv.Watch(wctx, recordKey(id))
	if err != nil {
		return false, ctx.Err() // nil: watch again
	}
	defer func() { _ = w.Stop() }()
	for {
		select {
		case e, ok := <-w.Updates():
			if !ok {
				return false, ctx.Err()
			}
			if e == nil || e.Operation() != jetstream.KeyValuePut {
				continue
			}
			var x Record
			if err := spool.DecodeDocument(recordDocument, e.Key(), e.Value(), &x); err != nil {
				return false, err
			}
			*r = x
			if r.State.Terminal() {
				return true, nil
			}
		case <-wctx.Done():
			return false, ctx.Err()
		}
	}
}

// Cancel cancels a running workflow: every step that has not started ends
// cancelled (a queued step when a worker receives its task, a pending one
// when its inputs finish), and the workflow ends cancelled once the steps
// running now finish. Cancelling a finished workflow changes nothing. It
// returns the record as stored.
func (s *Store) Cancel(ctx context.Context, id string) (Record, error) {
	r, err := s.modifyRecord(ctx, id, func(r *Record) bool {
		if r.State.Terminal() || r.Cancelled {
			return false
		}
		r.Cancelled = true
		r.settle()
		return true
	})
	if err != nil {
		return Record{}, err
	}
	return *r, nil
}

// RetryFailed runs a failed or cancelled workflow again from its failed
// steps: every step that did not complete gets a new run (a new task id),
// and the steps whose inputs all completed are enqueued. Completed steps
// keep their results. The on-failure step, if it was enqueued, gets a new
// run too: it runs again, with the new failure, when the retry fails, and
// stays pending when the retry completes. Called on a running workflow, it
// enqueues the ready steps again and finishes a workflow that waits only
// for an on-failure step that is terminal (mending a retry or an advance
// cut short by a crash), and changes nothing else.
func (s *Store) RetryFailed(ctx context.Context, id string) (Record, error) {
	r, err := s.Get(ctx, id)
	if err != nil {
		return r, err
	}
	if r.State == Completed {
		return r, fmt.Errorf("%w: workflow %q completed; nothing to retry", ErrNotFinished, id)
	}
	steps, err := s.steps(ctx, r)
	if err != nil {
		return r, err
	}
	if r.State != Running {
		for _, sr := range steps {
			if !rerun(&sr, r.Steps) {
				continue
			}
			name := sr.Name
			if _, err := s.modifyStep(ctx, id, name, func(x *StepRecord) bool {
				if !rerun(x, r.Steps) {
					return false
				}
				x.Run++
				x.State, x.Error, x.TaskID = Pending, "", StepTaskID(id, name, x.Run)
				return true
			}); err != nil {
				return r, err
			}
		}
		completed := make(map[string]bool, len(steps))
		for _, sr := range steps {
			completed[sr.Name] = sr.State == Completed
		}
		nr, err := s.modifyRecord(ctx, id, func(x *Record) bool {
			if x.State == Running {
				return false
			}
			x.State, x.FinishedAt = Running, nil
			x.Stopped, x.Cancelled, x.Failure, x.OnFailureDone = false, false, nil, false
			x.Retries++
			x.Waiting = map[string]*Wait{}
			for _, sr := range steps {
				if sr.Index == x.Steps || completed[sr.Name] {
					continue
				}
				x.Done.clear(sr.Index)
				x.NotOK.clear(sr.Index)
				if len(sr.After) > 0 {
					w := &Wait{}
					for _, dep := range sr.After {
						if !completed[dep] {
							w.Left++
						}
					}
					x.Waiting[sr.Name] = w
				}
			}
			return true
		})
		if err != nil {
			return r, err
		}
		r = *nr
	} else if err := s.finishOnFailure(ctx, r, steps); err != nil {
		return r, err
	}
	for _, sr := range steps {
		if sr.Index == r.Steps || r.Done.has(sr.Index) {
			continue
		}
		if w := r.Waiting[sr.Name]; len(sr.After) > 0 && (w == nil || w.Left > 0 || w.Bad > 0) {
			continue
		}
		more, err := s.enqueue(ctx, &r, sr.Name)
		if err != nil {
			return r, err
		}
		for _, f := range more {
			if err := s.Finish(ctx, Ref{Workflow: id, Step: f.name, TaskID: f.taskID}, f.o); err != nil {
				return r, err
			}
		}
	}
	return s.Get(ctx, id)
}

// rerun reports whether a retry gives step sr of a workflow of n steps a
// new run: a step that did not complete, and the on-failure step once it
// was enqueued, so that a retry that fails again runs it again.
func rerun(sr *StepRecord, n int) bool {
	if sr.Index == n {
		return sr.State != Pending
	}
	return sr.State != Completed
}

// finishOnFailure finishes the on-failure step of a running workflow r
// whose record still waits for it although the step is terminal: a crash
// came between the two writes, or the step is terminal from an earlier
// round that a retry did not give a new run, so nothing would run it.
func (s *Store) finishOnFailure(ctx context.Context, r Record, steps []StepRecord) error {
	if r.OnFailure == "" || r.OnFailureDone || r.Failure == nil {
		return nil
	}
	for _, sr := range steps {
		if sr.Index != r.Steps || !sr.State.Terminal() {
			continue
		}
		o := Outcome{State: sr.State, Error: sr.Error}
		return s.Finish(ctx, Ref{Workflow: r.ID, Step: sr.Name, TaskID: sr.TaskID}, o)
	}
	return nil
}
