package main

import (
	"context"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	spool "github.com/spoolq/spool/shared"
)

// Workers pulling by type: the pickup of a worker serving many exact
// types, and whether one service's backlog of slow tasks slows another
// service's worker.

const (
	// typesPickupN and typesPickupRate are the tasks of one pickup run of
	// the types scenario and the rate they are published at, one at a
	// time: each meets an idle worker.
	typesPickupN    = 200
	typesPickupRate = 50
	// typesSlots is the pickup worker's slots: fewer than its lanes, as
	// a worker of many types has.
	typesSlots = 8
	// idleWindow is how long the idle worker's CPU is read.
	idleWindow = 2 * time.Second
)

// typeNames is the exact types <prefix>.00 … of a -types spec
// <prefix>:<count>.
func typeNames(prefix string, n int) []string {
	out := make([]string, n)
	for i := range n {
		out[i] = fmt.Sprintf("%s.%02d", prefix, i)
	}
	return out
}

// parseTypes reads a -types spec: <prefix>:<count>, or exact types
// separated by commas.
func parseTypes(spec string) ([]string, error) {
	prefix, count, ok := strings.Cut(spec, ":")
	if !ok {
		return strings.Split(spec, ","), nil
	}
	n, err := strconv.Atoi(count)
	if err != nil || n < 1 || prefix == "" {
		return nil, fmt.Errorf("-types %q: want <prefix>:<count>, e.g. pick:50, or exact types", spec)
	}
	return typeNames(prefix, n), nil
}

// typesPickup: an idle worker of typesSlots slots serving 1 or 50 exact
// types (each with its five priority lanes, and the workflow submissions'),
// the CPU of it and the server while idle, then typesPickupN tasks
// published one at a time over every type and priority in turn; enqueue
// (stream timestamp) → handler start.
func (b *bench) typesPickup(ctx context.Context) error {
	restore, err := b.pullByType(ctx)
	if err != nil {
		return err
	}
	n := typesPickupN
	if b.cfg.quick {
		n = 20
	}
	for _, count := range []int{1, 50} {
		if err := b.purge(ctx); err != nil {
			return err
		}
		types := typeNames("pick", count)
		args := []string{"consume", "-url", b.srv.url, "-mode", "spool", "-task", "pickup", "-n", strconv.Itoa(n),
			"-conc", strconv.Itoa(typesSlots), "-types", "pick:" + strconv.Itoa(count)}
		cmd, err := childCmd(ctx, args...)
		if err != nil {
			return err
		}
		var idle float64
		publish := func() error {
			time.Sleep(200 * time.Millisecond) // the worker's first pulls
			idle = idleCPU(cmd, b.srv, idleWindow)
			tick := time.NewTicker(time.Second / typesPickupRate)
			defer tick.Stop()
			for i := range n {
				<-tick.C
				subject, err := b.names.TaskSubject(spool.Priorities[i%len(spool.Priorities)], types[(i/len(spool.Priorities))%count])
				if err != nil {
					return err
				}
				if _, err := b.js.PublishAsync(subject, nil); err != nil {
					return fmt.Errorf("publishing: %w", err)
				}
			}
			return nil
		}
		r, err := runReporting(cmd, b.srv, publish, fmt.Sprintf("consume child %v", args[1:]))
		if err != nil {
			return err
		}
		row := fmt.Sprintf("pickup by type, %d slots, %d types", typesSlots, count)
		b.add(row+": p50 (µs)", "spool", r.P50us)
		b.add(row+": p99 (µs)", "spool", r.P99us)
		b.add(row+": idle CPU, worker + server (%)", "spool", idle)
	}
	if err := b.purge(ctx); err != nil {
		return err
	}
	return restore(ctx)
}

// idleCPU is the CPU the child cmd and the server use over d, in percent
// of one core.
func idleCPU(cmd *exec.Cmd, srv *serverProc, d time.Duration) float64 {
	pid := cmd.Process.Pid
	c0, s0, t0 := procCPU(pid), srv.cpu(), time.Now()
	time.Sleep(d)
	used := procCPU(pid) - c0 + srv.cpu() - s0
	return 100 * used.Seconds() / time.Since(t0).Seconds()
}

// isolation: service A, a worker of 10 exact types with a no-op handler
// and 100 slots, drains its tasks alone, then again while service B, a
// worker of b.slow with 4 slots whose handler sleeps 50ms, has a backlog
// far longer than the run; A's throughput with B's backlog over alone.
func (b *bench) isolation(ctx context.Context) error {
	restore, err := b.pullByType(ctx)
	if err != nil {
		return err
	}
	nA, nB := 20_000, 20_000
	if b.cfg.quick {
		nA, nB = 500, 500
	}
	typesA := typeNames("a", 10)
	if err := b.makeTypeConsumers(ctx, append(typesA, "b.slow")...); err != nil {
		return err
	}
	drainA := func() (float64, error) {
		if err := b.publishOver(ctx, typesA, nA); err != nil {
			return 0, err
		}
		r, err := runConsume(ctx, b.srv, nil, "-mode", "spool", "-task", "drain", "-n", strconv.Itoa(nA), "-conc", "100", "-types", "a:10")
		if err != nil {
			return 0, err
		}
		return float64(r.Tasks) / r.Seconds, nil
	}
	if err := b.purge(ctx); err != nil {
		return err
	}
	alone, err := drainA()
	if err != nil {
		return err
	}
	if err := b.publishOver(ctx, []string{"b.slow"}, nB); err != nil {
		return err
	}
	// B runs until A's drain ends; its context's end kills it.
	bctx, stopB := context.WithCancel(ctx)
	started := make(chan struct{})
	doneB := make(chan struct{})
	go func() {
		defer close(doneB)
		_, _ = runConsume(bctx, b.srv, func() error { close(started); return nil },
			"-mode", "spool", "-task", "drain", "-n", strconv.Itoa(nB), "-conc", "4", "-types", "b.slow", "-sleep", "50ms")
	}()
	select {
	case <-started:
	case <-doneB:
		stopB()
		return fmt.Errorf("service B's worker ended before it started")
	case <-ctx.Done():
		stopB()
		return ctx.Err()
	}
	beside, err := drainA()
	stopB()
	<-doneB
	if err != nil {
		return err
	}
	b.add("isolation: service A alone (tasks/s)", "spool", alone)
	b.add("isolation: service A beside B's slow backlog (tasks/s)", "spool", beside)
	b.add("isolation: service A beside B's backlog / alone (×)", "spool", beside/alone)
	if err := b.purge(ctx); err != nil {
		return err
	}
	return restore(ctx)
}

// publishOver publishes n normal tasks over types in turn and waits for
// every ack.
func (b *bench) publishOver(ctx context.Context, types []string, n int) error {
	subjects := make([]string, len(types))
	for i, typ := range types {
		s, err := b.names.TaskSubject(spool.Normal, typ)
		if err != nil {
			return err
		}
		subjects[i] = s
	}
	payload := []byte(`{"n":1}`)
	for i := range n {
		if _, err := b.js.PublishAsync(subjects[i%len(subjects)], payload, jetstream.WithStallWait(time.Minute)); err != nil {
			return fmt.Errorf("publishing: %w", err)
		}
	}
	return b.filled(ctx)
}
