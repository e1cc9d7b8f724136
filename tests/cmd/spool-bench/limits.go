package main

import (
	"context"
	"fmt"
	"runtime"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	spool "github.com/spoolq/spool/shared"
	"github.com/spoolq/spool/shared/limits"
)

// limits: the processing drain at concurrency 100 with a flow-control rule
// on the task type, beside the same drain without one: a concurrency
// limit of 50, a per-key limit of 1 over 10,000 keys, and a rate limit.
// Throughput and CPU per task (consumer + server), each row against the
// unlimited run. The runs are small (limitsN): a limited type runs at tens
// to hundreds of tasks a second today, see the README's flow-control
// costs.
func (b *bench) limits(ctx context.Context) error {
	const conc = 100
	n := b.cfg.limitsN
	if b.mode == "SyncAlways" {
		n = max(1, n/4)
	}
	st, err := limits.Open(ctx, b.js, b.names)
	if err != nil {
		return err
	}
	rate := max(1, n/10) // ten seconds of backlog
	for _, v := range []struct {
		name string
		rule limits.Rule
		keys int
	}{
		{"unlimited", limits.Rule{Type: "bench"}, 0},
		{"concurrency limit 50", limits.Rule{Type: "bench", Concurrency: 50}, 0},
		{"per-key limit 1, 10,000 keys", limits.Rule{Type: "bench", KeyConcurrency: 1}, 10_000},
		{fmt.Sprintf("rate limit %d/s", rate), limits.Rule{Type: "bench", Rate: &limits.Rate{Limit: rate, Period: limits.Duration(time.Second)}}, 0},
	} {
		if err := b.purge(ctx); err != nil {
			return err
		}
		if err := b.fillKeyed(ctx, n, v.keys); err != nil {
			return err
		}
		// An empty rule deletes the type's rule.
		if err := st.Put(ctx, v.rule); err != nil {
			return fmt.Errorf("setting the %s rule: %w", v.name, err)
		}
		runtime.GC()
		row := fmt.Sprintf("flow control: %s, concurrency %d", v.name, conc)
		r, err := b.drain(ctx, row, "spool", "spool", n, conc)
		if err != nil {
			return err
		}
		tasks := float64(r.Tasks)
		b.add(row+", CPU per task: consumer + server (µs)", "spool", (r.CPUus+r.ServerCPUus)/tasks)
	}
	if err := st.Delete(ctx, "bench"); err != nil {
		return err
	}
	return b.purge(ctx)
}

// fillKeyed publishes n normal tasks of type bench, with Spool-Key k-<i
// mod keys> when keys > 0, and waits for every ack.
func (b *bench) fillKeyed(ctx context.Context, n, keys int) error {
	if keys == 0 {
		return b.fill(ctx, spool.Normal, n)
	}
	subject, err := b.names.TaskSubject(spool.Normal, "bench")
	if err != nil {
		return err
	}
	payload := []byte(`{"n":1}`)
	for i := range n {
		m := &nats.Msg{Subject: subject, Data: payload, Header: nats.Header{spool.HeaderKey: {"k-" + strconv.Itoa(i%keys)}}}
		if _, err := b.js.PublishMsgAsync(m, jetstream.WithStallWait(time.Minute)); err != nil {
			return fmt.Errorf("filling: %w", err)
		}
	}
	return b.filled(ctx)
}
