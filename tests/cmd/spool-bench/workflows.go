package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/spoolq/spool/consumer"
	"github.com/spoolq/spool/producer"
	"github.com/spoolq/spool/shared/workflow"
)

// Variants of the workflow rows: the same work as plain tasks, and as a
// workflow.
const (
	variantPlain    = "plain"
	variantWorkflow = "workflow"
)

// workflows: a worker of 100 slots in the harness's process and a no-op
// handler. Chain: a chain of 10 steps, submit to final state, against 10
// tasks enqueued one after the other, each once the previous completed
// (Enqueue + Wait). Group: a group of wfGroup members and a callback
// taking all their results, against wfGroup plain tasks enqueued with
// EnqueueBatch, each until every task completed.
func (b *bench) workflows(ctx context.Context) error {
	if err := b.purge(ctx); err != nil {
		return err
	}
	wnc, err := nats.Connect(b.srv.url, nats.Name("spool-bench-workflow-worker"))
	if err != nil {
		return fmt.Errorf("connecting the worker: %w", err)
	}
	defer wnc.Close()
	mux := consumer.NewMux()
	mux.HandleFunc("bench", func(ctx context.Context, t *consumer.Task) ([]byte, error) { return []byte("1"), nil })
	w, err := consumer.New(wnc, mux, consumer.WithConcurrency(100, 100), consumer.WithLogger(slog.New(slog.DiscardHandler)),
		consumer.WithPolling(100*time.Millisecond, 20*time.Millisecond))
	if err != nil {
		return err
	}
	if err := w.Start(ctx); err != nil {
		return err
	}
	defer func() {
		stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		if err := w.Stop(stopCtx); err != nil {
			b.log.Warn("stopping the workflow worker", "error", err)
		}
	}()
	client, err := producer.New(b.nc, producer.WithTimeout(30*time.Second))
	if err != nil {
		return err
	}
	defer client.Close()
	b.wfRuns++
	run := b.wfRuns

	// Chain of 10, end to end.
	const chainLen = 10
	var plain, wf []time.Duration
	for i := range b.cfg.wfChains {
		start := time.Now()
		for j := range chainLen {
			task := producer.NewTask("bench", []byte("1"))
			task.ID = fmt.Sprintf("chain-%d-%d-%d", run, i, j)
			res, err := client.Enqueue(ctx, task)
			if err != nil {
				return err
			}
			if _, err := client.Wait(ctx, res.ID); err != nil {
				return err
			}
		}
		plain = append(plain, time.Since(start))
		var d workflow.Doc
		d.ID = fmt.Sprintf("chain-%d-%d", run, i)
		for j := range chainLen {
			d.Chain(workflow.Task(fmt.Sprintf("s%d", j), "bench", []byte("1")))
		}
		start = time.Now()
		if err := runWorkflow(ctx, client, d); err != nil {
			return err
		}
		wf = append(wf, time.Since(start))
	}
	row := fmt.Sprintf("workflow: chain of %d steps, end to end (ms)", chainLen)
	b.add(row, variantPlain, ms(medianDur(plain)))
	b.add(row, variantWorkflow, ms(medianDur(wf)))

	// Group and callback.
	n := b.cfg.wfGroup
	if err := b.purge(ctx); err != nil {
		return err
	}
	tasks := make([]producer.Task, n)
	for i := range tasks {
		tasks[i] = producer.NewTask("bench", []byte("1"))
	}
	start := time.Now()
	results, err := client.EnqueueBatch(ctx, tasks)
	if err != nil {
		return err
	}
	for _, r := range results {
		if r.Err != nil {
			return r.Err
		}
	}
	if err := b.waitDrained(ctx); err != nil {
		return err
	}
	row = fmt.Sprintf("workflow: group of %d and a callback, total (s)", n)
	b.add(row, variantPlain, time.Since(start).Seconds())
	members := make([]workflow.Step, n)
	for i := range members {
		members[i] = workflow.Task(fmt.Sprintf("m%d", i), "bench", []byte("1"))
	}
	d := workflow.Doc{ID: fmt.Sprintf("group-%d", run)}
	d.Group(members, workflow.Task("callback", "bench", nil))
	start = time.Now()
	if err := runWorkflow(ctx, client, d); err != nil {
		return err
	}
	b.add(row, variantWorkflow, time.Since(start).Seconds())
	return nil
}

// runWorkflow submits d and waits until it completed.
func runWorkflow(ctx context.Context, client *producer.Client, d workflow.Doc) error {
	id, err := client.SubmitWorkflow(ctx, d)
	if err != nil {
		return err
	}
	st, err := client.WaitWorkflow(ctx, id)
	if err != nil {
		return err
	}
	if st.State != workflow.Completed {
		return fmt.Errorf("workflow %s ended %s", id, st.State)
	}
	return nil
}

// waitDrained returns once the task stream is empty (every task acked).
func (b *bench) waitDrained(ctx context.Context) error {
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for {
		s, err := b.js.Stream(ctx, b.names.TaskStream())
		if err != nil {
			return err
		}
		if s.CachedInfo().State.Msgs == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return errors.Join(ctx.Err(), errors.New("the task stream did not drain"))
		case <-t.C:
		}
	}
}

func medianDur(d []time.Duration) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2]
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1e3 }
