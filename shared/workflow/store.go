package workflow

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	spool "github.com/spoolq/spool/shared"
	"github.com/spoolq/spool/shared/jsproto"
)

// Errors of the store.
var (
	// ErrNotFound: no workflow has that id.
	ErrNotFound = errors.New("workflow not found")
	// ErrExists: a workflow with that id was submitted already.
	ErrExists = errors.New("workflow exists")
	// ErrNotFinished: RetryFailed needs a failed or cancelled workflow.
	ErrNotFinished = errors.New("workflow not finished")
)

// DefaultTryTimeout bounds one try of a bucket or stream request; a try
// that times out (a leader change can swallow a request) is retried until
// the caller's context ends.
const DefaultTryTimeout = jsproto.DefaultPerTry

// Store reads and advances workflows in the workflows bucket and enqueues
// their steps' tasks. It is safe for concurrent use.
type Store struct {
	js      jetstream.JetStream
	names   spool.Names
	kv      jetstream.KeyValue
	results jetstream.KeyValue
	log     *slog.Logger
	// maxMsg is the largest task message the connection carries.
	maxMsg int
	try    time.Duration
	// batches holds the group commit of each workflow with changes in
	// flight (*recordBatch by workflow id; see changeRecord).
	batches sync.Map
}

// Open binds the workflows and results buckets of names.
func Open(ctx context.Context, js jetstream.JetStream, names spool.Names, log *slog.Logger) (*Store, error) {
	s := &Store{js: js, names: names, log: log, maxMsg: int(js.Conn().MaxPayload()), try: DefaultTryTimeout}
	err := s.retry(ctx, func(ctx context.Context) (err error) {
		s.kv, err = js.KeyValue(ctx, names.WorkflowsBucket())
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("binding workflows bucket %q (provision it first): %w", names.WorkflowsBucket(), err)
	}
	err = s.retry(ctx, func(ctx context.Context) (err error) {
		s.results, err = js.KeyValue(ctx, names.ResultsBucket())
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("binding results bucket %q: %w", names.ResultsBucket(), err)
	}
	return s, nil
}

// retry runs op with a per-try timeout until it succeeds, fails with an
// error that a retry cannot mend, or ctx ends (jsproto.Tries: a request
// swallowed in a leader change is sent again).
func (s *Store) retry(ctx context.Context, op func(ctx context.Context) error) error {
	return s.retryFor(ctx, s.try, op)
}

// retryFor is retry with a per-try timeout of its own.
func (s *Store) retryFor(ctx context.Context, try time.Duration, op func(ctx context.Context) error) error {
	return jsproto.Tries{PerTry: try, Conn: s.js.Conn()}.Do(ctx, "workflow state", func(ctx context.Context) error {
		err := op(ctx)
		if errors.Is(err, nats.ErrReconnectBufExceeded) {
			// A connection without a reconnect buffer refuses a publish
			// while it reconnects: as retryable as a disconnection.
			return fmt.Errorf("%w: %w", nats.ErrDisconnected, err)
		}
		return err
	})
}

// recordDocument is the kind of document a *spool.DocumentError names
// for a workflow's record or one of its step records.
const recordDocument = "workflow record"

// get reads key into v; ok is false when the key does not exist. A record
// that cannot be decoded gives a *spool.DocumentError.
func (s *Store) get(ctx context.Context, key string, v any) (rev uint64, ok bool, err error) {
	var e jetstream.KeyValueEntry
	err = s.retry(ctx, func(ctx context.Context) (err error) {
		e, err = s.kv.Get(ctx, key)
		return err
	})
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("reading %s: %w", key, err)
	}
	if err := spool.DecodeDocument(recordDocument, key, e.Value(), v); err != nil {
		return 0, false, err
	}
	return e.Revision(), true, nil
}

// errConflict is a compare-and-set that lost: someone wrote first.
var errConflict = errors.New("revision conflict")

// update writes v over revision rev (0: create). A lost race returns
// errConflict. A try that timed out may have been stored: the retry then
// fails on the revision, and the caller rereads and finds its own write.
func (s *Store) update(ctx context.Context, key string, v any, rev uint64) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encoding %s: %w", key, err)
	}
	err = s.retry(ctx, func(ctx context.Context) error {
		if rev == 0 {
			_, err := s.kv.Create(ctx, key, b)
			return err
		}
		_, err := s.kv.Update(ctx, key, b, rev)
		return err
	})
	if errors.Is(err, jetstream.ErrKeyExists) || isWrongSeq(err) {
		return errConflict
	}
	if err != nil {
		return fmt.Errorf("writing %s: %w", key, err)
	}
	return nil
}

func isWrongSeq(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence
}

// modifyRecord applies fn to the workflow record until its
// compare-and-set wins, and returns the record as stored. fn returns false
// when there is nothing to change.
func (s *Store) modifyRecord(ctx context.Context, id string, fn func(r *Record) bool) (*Record, error) {
	for {
		var r Record
		rev, ok, err := s.get(ctx, recordKey(id), &r)
		if err != nil {
			return nil, err
		}
		if !ok {
			return nil, fmt.Errorf("%w: %q", ErrNotFound, id)
		}
		if !fn(&r) {
			return &r, nil
		}
		err = s.update(ctx, recordKey(id), &r, rev)
		if errors.Is(err, errConflict) {
			continue
		}
		if err != nil {
			return nil, err
		}
		return &r, nil
	}
}

// modifyStep is modifyRecord for a step record.
func (s *Store) modifyStep(ctx context.Context, id, name string, fn func(r *StepRecord) bool) (*StepRecord, error) {
	for {
		var r StepRecord
		rev, ok, err := s.get(ctx, stepKey(id, name), &r)
		if err != nil {
			return nil, err
		}
		if !ok {
			return nil, fmt.Errorf("%w: step %q of workflow %q", ErrNotFound, name, id)
		}
		if !fn(&r) {
			return &r, nil
		}
		r.UpdatedAt = time.Now().UTC()
		err = s.update(ctx, stepKey(id, name), &r, rev)
		if errors.Is(err, errConflict) {
			continue
		}
		if err != nil {
			return nil, err
		}
		return &r, nil
	}
}

// result reads the result document of a task; ok is false when there is
// none.
func (s *Store) result(ctx context.Context, taskID string) (spool.Result, bool, error) {
	var doc spool.Result
	var e jetstream.KeyValueEntry
	err := s.retry(ctx, func(ctx context.Context) (err error) {
		e, err = s.results.Get(ctx, taskID)
		return err
	})
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return doc, false, nil
	}
	if err != nil {
		return doc, false, fmt.Errorf("reading result of task %s: %w", taskID, err)
	}
	if err := spool.DecodeDocument("result document", taskID, e.Value(), &doc); err != nil {
		return doc, false, err
	}
	return doc, true, nil
}

// steps reads every step record of the workflow r, in index order. Every
// record is stored before r is (Submit), so a read that finds fewer came
// from a replica that is behind (jsproto.ErrBehind) and is tried again.
func (s *Store) steps(ctx context.Context, r Record) ([]StepRecord, error) {
	id, n := r.ID, r.Steps
	if r.OnFailure != "" {
		n++
	}
	var out []StepRecord
	// Reading 10,000 steps takes longer than one request.
	err := s.retryFor(ctx, 15*s.try, func(ctx context.Context) error {
		out = make([]StepRecord, 0, n)
		w, err := s.kv.Watch(ctx, stepsFilter(id), jetstream.IgnoreDeletes())
		if err != nil {
			return err
		}
		defer func() { _ = w.Stop() }()
		for {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case e, ok := <-w.Updates():
				if !ok {
					return errors.New("watch closed")
				}
				if e == nil {
					if len(out) < n {
						return fmt.Errorf("%w: %d of %d step records", jsproto.ErrBehind, len(out), n)
					}
					return nil
				}
				var r StepRecord
				if err := spool.DecodeDocument(recordDocument, e.Key(), e.Value(), &r); err != nil {
					return err
				}
				out = append(out, r)
			}
		}
	})
	if err != nil {
		return nil, fmt.Errorf("reading the steps of workflow %q: %w", id, err)
	}
	sortByIndex(out)
	return out, nil
}

func sortByIndex(rs []StepRecord) {
	slices.SortFunc(rs, func(a, b StepRecord) int { return a.Index - b.Index })
}

// fanOut is how many reads of a workflow's steps or results run at once
// (a callback gathering 10,000 inputs, a status of 10,000 steps).
const fanOut = 32

// forEach calls fn(i) for i in [0, n) on up to fanOut goroutines and
// returns the first error.
func forEach(ctx context.Context, n int, fn func(ctx context.Context, i int) error) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	next := make(chan int)
	var wg sync.WaitGroup
	for range min(fanOut, n) {
		wg.Go(func() {
			for i := range next {
				if err := fn(ctx, i); err != nil {
					cancel(err)
				}
			}
		})
	}
feed:
	for i := range n {
		select {
		case next <- i:
		case <-ctx.Done():
			break feed
		}
	}
	close(next)
	wg.Wait()
	if err := context.Cause(ctx); err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return ctx.Err()
}
