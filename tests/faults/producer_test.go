package faults_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/spoolq/spool/producer"
	spool "github.com/spoolq/spool/shared"
	"github.com/spoolq/spool/tests/checker"
)

// faultTask is the payload of the fault worker's fault.task type.
type faultTask struct {
	V              string `json:"v"`
	SleepMS        int    `json:"sleep_ms,omitempty"`
	IgnoreDeadline bool   `json:"ignore_deadline,omitempty"`
	PanicAttempts  int    `json:"panic_attempts,omitempty"`
	FailAttempts   int    `json:"fail_attempts,omitempty"`
	// Hold makes the run wait, after its failing attempts, until the
	// test puts this key in the bucket fault_holds (holdBucket).
	Hold string `json:"hold,omitempty"`
}

// newTask builds a fault.task with a unique value derived from id.
func newTask(t testing.TB, id string, p spool.Priority, payload faultTask) (producer.Task, string) {
	t.Helper()
	if payload.V == "" {
		payload.V = "v-" + id + "-" + spool.NewID()
	}
	b, err := json.Marshal(payload)
	if err != nil {
		t.Fatal(err)
	}
	return producer.Task{Type: "fault.task", Priority: &p, ID: id, Payload: b}, payload.V
}

// loadGen enqueues tasks and records every acknowledged one in a checker.
type loadGen struct {
	client *producer.Client
	chk    *checker.Checker
	// Retries counts enqueues retried with the same id after an error.
	Retries atomic.Int64
	// Sent counts the tasks of enqueue's list whose batch returned:
	// tasks[:Sent] were enqueued (but for the failed ones, retried later).
	Sent atomic.Int64

	mu sync.Mutex
	// acks is what the producer said of each acknowledged task (the
	// first acknowledgement), to explain a loss.
	acks map[string]ackRecord
	// tried holds the ids whose enqueue failed at least once.
	tried map[string]bool
}

// record keeps what the producer said of an acknowledged task.
func (g *loadGen) record(r producer.EnqueueResult, at time.Time) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.acks == nil {
		g.acks = map[string]ackRecord{}
	}
	if _, ok := g.acks[r.ID]; !ok {
		g.acks[r.ID] = ackRecord{seq: r.Sequence, dup: r.Duplicate, subject: r.Subject, at: at, retried: g.tried[r.ID]}
	}
}

// failed notes a failed enqueue of task id.
func (g *loadGen) failed(id string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.tried == nil {
		g.tried = map[string]bool{}
	}
	g.tried[id] = true
}

// acked returns what the producer said of each acknowledged task.
func (g *loadGen) acked() map[string]ackRecord {
	g.mu.Lock()
	defer g.mu.Unlock()
	return maps.Clone(g.acks)
}

// tasksFor returns n fault.task tasks with ids <prefix>-<i>, spread over
// the five priorities, and their values.
func tasksFor(t testing.TB, prefix string, n int) ([]producer.Task, []string) {
	t.Helper()
	tasks := make([]producer.Task, n)
	values := make([]string, n)
	for i := range n {
		tasks[i], values[i] = newTask(t, fmt.Sprintf("%s-%06d", prefix, i), spool.Priorities[i%len(spool.Priorities)], faultTask{})
	}
	return tasks, values
}

// enqueue enqueues tasks in batches of batch, one batch every pace (0: as
// fast as acks come), retrying every failed task with the same id until it
// is acknowledged or ctx ends. It records acknowledged tasks with Enqueued
// and, when ctx ends first, the rest with Attempted, and returns ctx's
// error then.
func (g *loadGen) enqueue(ctx context.Context, tasks []producer.Task, values []string, batch int, pace time.Duration) error {
	value := make(map[string]string, len(tasks))
	for i, tk := range tasks {
		value[tk.ID] = values[i]
	}
	var tick <-chan time.Time
	if pace > 0 {
		ticker := time.NewTicker(pace)
		defer ticker.Stop()
		tick = ticker.C
	}
	pending := tasks
	var failed []producer.Task
	for len(pending) > 0 || len(failed) > 0 {
		if len(pending) == 0 {
			// Retry the failures; the same id makes a stored one a duplicate.
			pending, failed = failed, nil
			g.Retries.Add(int64(len(pending)))
			select {
			case <-ctx.Done():
			case <-time.After(100 * time.Millisecond): // retry backoff, not a wait for a condition
			}
		}
		if err := ctx.Err(); err != nil {
			for _, tk := range append(pending, failed...) {
				g.chk.Attempted(tk.ID, value[tk.ID])
			}
			return err
		}
		n := min(batch, len(pending))
		part := pending[:n]
		pending = pending[n:]
		bctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		results, err := g.client.EnqueueBatch(bctx, part)
		cancel()
		var be *producer.BatchError
		if err != nil && !errors.As(err, &be) {
			return err
		}
		at := time.Now()
		for i, r := range results {
			if r.Err != nil {
				var invalid *producer.InvalidTaskError
				if errors.As(r.Err, &invalid) {
					return fmt.Errorf("task %s is invalid: %w", part[i].ID, r.Err)
				}
				g.chk.Attempted(part[i].ID, value[part[i].ID])
				g.failed(part[i].ID)
				failed = append(failed, part[i])
				continue
			}
			g.chk.Enqueued(r.ID, value[r.ID])
			g.record(r.EnqueueResult, at)
		}
		g.Sent.Add(int64(len(part)))
		if tick != nil {
			select {
			case <-tick:
			case <-ctx.Done():
			}
		}
	}
	return nil
}
