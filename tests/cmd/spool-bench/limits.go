package main

import (
	"context"
	"fmt"
	"runtime"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/spoolq/spool/consumer"
	spool "github.com/spoolq/spool/shared"
	"github.com/spoolq/spool/shared/limits"
)

// limits: the processing drain at concurrency 100 with a flow-control rule
// on the task type, beside the same drain without one: a concurrency
// limit of 50, a per-key limit of 1 over 10,000 keys, and rate limits of
// a tenth and of the whole run's tasks per second (ten seconds of backlog
// each, the fast one with ten times the tasks), with the rate reached.
// Throughput and CPU per task (consumer + server), each row against the
// unlimited run. The runs are small (limitsN): a limited type runs at tens
// to hundreds of tasks a second today, see the flow-control
// guide's costs (docs/guide/flow-control.md). Then the head-of-line rows (headOfLine).
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
	// Workers pulling by type: a limited type's consumer carries its
	// concurrency limit, so the server holds it.
	restore, err := b.pullByType(ctx)
	if err != nil {
		return err
	}
	defer func() {
		if err := restore(context.WithoutCancel(ctx)); err != nil {
			b.log.Warn("putting back how workers pull", "error", err)
		}
	}()
	rate := max(1, n/10) // ten seconds of backlog
	// The fast rate runs ten times as many tasks, for as long.
	fast := 10 * rate
	for _, v := range []struct {
		name string
		rule limits.Rule
		keys int
		n    int
		rate int // the rule's rate per second (0: none)
	}{
		{"unlimited", limits.Rule{Type: "bench"}, 0, n, 0},
		{"concurrency limit 50", limits.Rule{Type: "bench", Concurrency: 50}, 0, n, 0},
		{"per-key limit 1, 10,000 keys", limits.Rule{Type: "bench", KeyConcurrency: 1}, 10_000, n, 0},
		{fmt.Sprintf("rate limit %d/s", rate), limits.Rule{Type: "bench", Rate: &limits.Rate{Limit: rate, Period: limits.Duration(time.Second)}}, 0, n, rate},
		{fmt.Sprintf("rate limit %d/s", fast), limits.Rule{Type: "bench", Rate: &limits.Rate{Limit: fast, Period: limits.Duration(time.Second)}}, 0, 10 * n, fast},
	} {
		if err := b.purge(ctx); err != nil {
			return err
		}
		if err := b.fillKeyed(ctx, v.n, v.keys); err != nil {
			return err
		}
		// An empty rule deletes the type's rule.
		if err := st.Put(ctx, v.rule); err != nil {
			return fmt.Errorf("setting the %s rule: %w", v.name, err)
		}
		runtime.GC()
		row := fmt.Sprintf("flow control: %s, concurrency %d", v.name, conc)
		r, err := b.drain(ctx, row, "spool", "spool", v.n, conc)
		if err != nil {
			return err
		}
		tasks := float64(r.Tasks)
		b.add(row+", CPU per task: consumer + server (µs)", "spool", (r.CPUus+r.ServerCPUus)/tasks)
		b.add(row+", hand-backs per task", "spool", float64(r.HandBacks)/tasks)
		if v.rate > 0 {
			// From the first start to the last, as the fault suite's
			// checker measures it: the worker's start is left out.
			b.add(row+", rate reached (% of the limit)", "spool", 100*(tasks-1)/r.StartSpan/float64(v.rate))
			b.add(row+", most starts in any second", "spool", float64(r.MostInSecond))
		}
		b.add(row+", messages per task: worker sent", "spool", float64(r.OutMsgs)/tasks)
		b.add(row+", messages per task: worker received", "spool", float64(r.InMsgs)/tasks)
		switch {
		case v.rate > 0:
			if err := b.rawAtRate(ctx, row, v.n, v.rate); err != nil {
				return err
			}
		case v.rule.Concurrency == 0:
			if err := b.rawKeyed(ctx, row, v.n, v.keys, conc); err != nil {
				return err
			}
		}
	}
	if err := st.Delete(ctx, "bench"); err != nil {
		return err
	}
	if err := b.headOfLine(ctx, st); err != nil {
		return err
	}
	return b.purge(ctx)
}

// rawAtRate drains n queued tasks of the type bench with raw JetStream,
// nats.go's Consume with its defaults acking at most rate tasks a
// second: the floor of a rate-limited task's CPU, in the flow-control
// row's raw column.
func (b *bench) rawAtRate(ctx context.Context, row string, n, rate int) error {
	if err := b.purge(ctx); err != nil {
		return err
	}
	if err := b.fill(ctx, spool.Normal, n); err != nil {
		return err
	}
	runtime.GC()
	r, err := runConsume(ctx, b.srv, nil, "-mode", "raw", "-task", "drain", "-n", strconv.Itoa(n),
		"-rate", strconv.Itoa(rate), "-consumer", b.names.TypeConsumer(spool.Normal, "bench"))
	if err != nil {
		return fmt.Errorf("raw at %d/s: %w", rate, err)
	}
	b.add(row+", CPU per task: consumer + server (µs)", "raw", (r.CPUus+r.ServerCPUus)/float64(max(1, r.Tasks)))
	return nil
}

// rawKeyed drains n queued tasks of the type bench, over keys keys (0:
// none), with raw JetStream: a pool of conc goroutines storing each
// result and taking a KV slot per key (see rawKeyed in rawkeyed.go). Over
// the unlimited row's, it is the floor of a per-key limit's share.
func (b *bench) rawKeyed(ctx context.Context, row string, n, keys, conc int) error {
	if err := b.purge(ctx); err != nil {
		return err
	}
	if err := b.fillKeyed(ctx, n, keys); err != nil {
		return err
	}
	runtime.GC()
	r, err := runConsume(ctx, b.srv, nil, "-mode", "raw-keyed", "-task", "drain", "-n", strconv.Itoa(n),
		"-conc", strconv.Itoa(conc), "-consumer", b.names.TypeConsumer(spool.Normal, "bench"))
	if err != nil {
		return fmt.Errorf("raw keyed: %w", err)
	}
	b.add(row+" (tasks/s)", "raw", float64(r.Tasks)/r.Seconds)
	b.add(row+", CPU per task: consumer + server (µs)", "raw", (r.CPUus+r.ServerCPUus)/float64(max(1, r.Tasks)))
	return nil
}

// The head-of-line rows: the type limitedType, limited to limitedConc
// running at once and backlogged (each run takes limitedRun), beside the
// unlimited type bench, against bench alone.
const (
	limitedType = "bench.limited"
	limitedConc = 5
	limitedRun  = 10 * time.Millisecond
)

// handleLimited is the handler of limitedType in the consume child.
func handleLimited(ctx context.Context, _ *consumer.Task) ([]byte, error) {
	t := time.NewTimer(limitedRun)
	defer t.Stop()
	select {
	case <-t.C:
		return nil, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// completed counts the completed tasks of typ in s, or of every type when
// typ is empty.
func completed(s consumer.Stats, typ string) uint64 {
	if typ == "" {
		return s.Total().Completed
	}
	return s.Types[typ].Completed
}

// headOfLine: the throughput of the unlimited type bench (20× the limits
// runs' tasks, no-op handler, concurrency 100) alone, and then with as
// many tasks of limitedType as the limits runs have queued among them
// (one in 21), limited to limitedConc running at once: the limited type
// stays backlogged for the whole run, and its waiting must not slow the
// unlimited type (the issue asks at least 0.9× the throughput alone).
func (b *bench) headOfLine(ctx context.Context, st *limits.Store) error {
	const conc = 100
	nLimited := b.cfg.limitsN
	if b.mode == "SyncAlways" {
		nLimited = max(1, nLimited/4)
	}
	nFree := 20 * nLimited
	if err := st.Put(ctx, limits.Rule{Type: limitedType, Concurrency: limitedConc}); err != nil {
		return fmt.Errorf("setting the %s rule: %w", limitedType, err)
	}
	defer func() {
		// Best effort: the next run of the harness sets the rule again.
		_ = st.Delete(context.WithoutCancel(ctx), limitedType)
	}()
	var alone float64
	for _, beside := range []int{0, nLimited} {
		if err := b.purge(ctx); err != nil {
			return err
		}
		if err := b.fillMixed(ctx, nFree, beside); err != nil {
			return err
		}
		runtime.GC()
		row := "no head-of-line blocking: unlimited type alone, concurrency 100"
		if beside > 0 {
			row = fmt.Sprintf("no head-of-line blocking: unlimited type beside a backlogged type limited to %d, concurrency %d", limitedConc, conc)
		}
		r, err := b.drain(ctx, row, "spool", "spool", nFree, conc, "-count-type", "bench")
		if err != nil {
			return err
		}
		tput := float64(r.Tasks) / r.Seconds
		if beside == 0 {
			alone = tput
			continue
		}
		b.add("no head-of-line blocking: unlimited type's throughput beside the limited type / alone (×)", "spool", tput/alone)
	}
	return nil
}

// fillMixed publishes nFree normal tasks of type bench and nLimited of
// limitedType spread evenly among them, and waits for every ack.
func (b *bench) fillMixed(ctx context.Context, nFree, nLimited int) error {
	free, err := b.names.TaskSubject(spool.Normal, "bench")
	if err != nil {
		return err
	}
	limited, err := b.names.TaskSubject(spool.Normal, limitedType)
	if err != nil {
		return err
	}
	payload := []byte(`{"n":1}`)
	every := 0
	if nLimited > 0 {
		every = max(1, nFree/nLimited)
	}
	for i := range nFree {
		subjects := []string{free}
		if every > 0 && i%every == 0 && i/every < nLimited {
			subjects = append(subjects, limited)
		}
		for _, subj := range subjects {
			if _, err := b.js.PublishAsync(subj, payload, jetstream.WithStallWait(time.Minute)); err != nil {
				return fmt.Errorf("filling: %w", err)
			}
		}
	}
	return b.filled(ctx)
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
