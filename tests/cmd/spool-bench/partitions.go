package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/spoolq/spool/consumer"
	spool "github.com/spoolq/spool/shared"
	"github.com/spoolq/spool/streams"
)

// partitionCounts are the task partition counts the partitions scenario
// compares.
var partitionCounts = []int{1, 2, 3}

// partitionTypes is how many task types the partitions scenario spreads
// its tasks over (the mapping hashes priority and type).
const partitionTypes = 32

// partitionConc is the concurrency of each partition's consumer.
const partitionConc = 100

// partitionNames is the prefix of the partitions scenario's topology with
// k partitions.
func partitionNames(k int) spool.Names {
	n, err := spool.NewNames("pk" + strconv.Itoa(k))
	if err != nil {
		panic(err) // a constant, valid prefix
	}
	return n
}

// runPartitions measures, on the local 3-node cluster (default sync, R3),
// one topology per partition count: where the partition leaders are, raw
// publish throughput through the servers' subject mapping, and processing
// throughput with one consumer per partition, raw (Fetch+Ack) and Spool
// (a Worker pinned to each partition, in this process), and with one
// Spool Worker pulling every partition, at concurrency partitionConc and
// at partitionConc per partition (the pinned workers' slots), back to
// back.
func runPartitions(ctx context.Context, cfg config, res *results, log *slog.Logger) error {
	mode := "cluster R3, task partitions"
	var maps []string
	for _, k := range partitionCounts {
		if k > 1 {
			src, dst := partitionNames(k).PartitionMapping(k)
			maps = append(maps, src+"="+dst)
		}
	}
	b, cl, err := openCluster(ctx, clusterConfig(cfg, false), false, mode, strings.Join(maps, ";"), res, log)
	if err != nil {
		return err
	}
	defer b.close(cl)
	res.modes = append(res.modes, mode)
	for run := 1; run <= cfg.runs; run++ {
		for _, k := range partitionCounts {
			b.log.Info("scenario", "name", "partitions", "partitions", k, "run", run)
			if err := b.partitions(ctx, k); err != nil {
				return fmt.Errorf("%s, %d partitions, run %d: %w", mode, k, run, err)
			}
		}
	}
	return nil
}

// partitions measures one partition count on a fresh topology.
func (b *bench) partitions(ctx context.Context, k int) error {
	names := partitionNames(k)
	topo, err := streams.New(names, benchSettings(streams.Settings{Replicas: clusterSize, Partitions: k}))
	if err != nil {
		return err
	}
	pctx, cancel := context.WithTimeout(ctx, clusterReady)
	defer cancel()
	for p := range k {
		if err := b.js.DeleteStream(pctx, names.PartitionStream(p)); err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
			return fmt.Errorf("deleting %s: %w", names.PartitionStream(p), err)
		}
	}
	if err := streams.Provision(pctx, b.js, topo, slog.New(slog.DiscardHandler)); err != nil {
		return fmt.Errorf("provisioning %d partitions: %w", k, err)
	}
	leaders := map[string]bool{}
	for p := range k {
		s, err := b.js.Stream(pctx, names.PartitionStream(p))
		if err != nil {
			return err
		}
		if ci := s.CachedInfo().Cluster; ci != nil {
			leaders[ci.Leader] = true
		}
	}
	label := fmt.Sprintf("%d partition", k)
	if k > 1 {
		label += "s"
	}
	b.add(label+": servers leading a task partition", "raw", float64(len(leaders)))

	n := b.cfg.processN
	t0 := time.Now()
	if err := b.fillPartitions(ctx, names, n); err != nil {
		return err
	}
	b.add(label+": enqueue, PublishAsync over "+strconv.Itoa(partitionTypes)+" types (tasks/s)", "raw", float64(n)/time.Since(t0).Seconds())

	row := fmt.Sprintf("%s: processing, concurrency %d per partition (tasks/s)", label, partitionConc)
	rate, err := b.rawPartitions(ctx, names, k, false)
	if err != nil {
		return err
	}
	b.add(row, "raw", rate)
	if err := b.fillPartitions(ctx, names, n); err != nil {
		return err
	}
	rate, err = b.rawPartitions(ctx, names, k, true)
	if err != nil {
		return err
	}
	b.add(row, "raw-results", rate)
	if err := b.fillPartitions(ctx, names, n); err != nil {
		return err
	}
	pinned := make([][]consumer.Option, k)
	for p := range k {
		pinned[p] = []consumer.Option{consumer.WithPartition(p), consumer.WithConcurrency(partitionConc, partitionConc)}
	}
	rate, err = b.spoolPartitions(ctx, names, n, pinned...)
	if err != nil {
		return err
	}
	b.add(row, "spool", rate)
	for _, conc := range []int{partitionConc, partitionConc * k} {
		if k == 1 && conc != partitionConc {
			continue // the same worker as above
		}
		if err := b.fillPartitions(ctx, names, n); err != nil {
			return err
		}
		rate, err = b.spoolPartitions(ctx, names, n, []consumer.Option{consumer.WithConcurrency(conc, conc)})
		if err != nil {
			return err
		}
		b.add(fmt.Sprintf("%s: processing, one worker pulling every partition, concurrency %d (tasks/s)", label, conc), "spool", rate)
	}
	return nil
}

// fillPartitions publishes n normal tasks over partitionTypes types and
// waits for every ack. Each carries its id in Nats-Msg-Id, as Spool's
// producer sends it: the stream sequences of the partitions overlap, so
// tasks without an id would share result keys across partitions.
func (b *bench) fillPartitions(ctx context.Context, names spool.Names, n int) error {
	run := strconv.FormatInt(time.Now().UnixNano(), 36)
	for i := range n {
		subject, err := names.TaskSubject(spool.Normal, "bench.t"+strconv.Itoa(i%partitionTypes))
		if err != nil {
			return err
		}
		id := jetstream.WithMsgID("pt-" + run + "-" + strconv.Itoa(i))
		if _, err := b.js.PublishAsync(subject, []byte(`{"n":1}`), jetstream.WithStallWait(time.Minute), id); err != nil {
			return fmt.Errorf("publishing: %w", err)
		}
	}
	return b.filled(ctx)
}

// rawPartitions drains every partition's normal consumer at once, one
// Fetch(32)+Ack loop per partition, and returns the tasks per second.
// With results, each batch's results are stored in the one results
// bucket every partition shares (PublishAsync, awaited) before the
// batch is acked: the floor of what Spool does.
func (b *bench) rawPartitions(ctx context.Context, names spool.Names, k int, results bool) (float64, error) {
	var total atomic.Int64
	errs := make([]error, k)
	var wg sync.WaitGroup
	t0 := time.Now()
	for p := range k {
		cons, err := b.js.Consumer(ctx, names.PartitionStream(p), names.Consumer(spool.Normal))
		if err != nil {
			return 0, fmt.Errorf("binding partition %d: %w", p, err)
		}
		info, err := cons.Info(ctx)
		if err != nil {
			return 0, err
		}
		want := int(info.NumPending)
		wg.Go(func() {
			got, progress := 0, time.Now()
			for got < want {
				if time.Since(progress) > stallLimit {
					errs[p] = fmt.Errorf("partition %d: no task for %s (%d of %d)", p, stallLimit, got, want)
					return
				}
				batch, err := cons.Fetch(min(32, want-got), jetstream.FetchMaxWait(5*time.Second))
				if err != nil {
					errs[p] = err
					return
				}
				var msgs []jetstream.Msg
				var puts []jetstream.PubAckFuture
				for m := range batch.Messages() {
					msgs = append(msgs, m)
					if !results {
						continue
					}
					md, err := m.Metadata()
					if err != nil {
						errs[p] = err
						return
					}
					id := fmt.Sprintf("p%d-%d", p, md.Sequence.Stream)
					doc := fmt.Appendf(nil, `{"id":%q,"state":"completed"}`, id)
					put, err := b.js.PublishAsync(names.ResultSubject(id), doc, jetstream.WithStallWait(stallLimit))
					if err != nil {
						errs[p] = err
						return
					}
					puts = append(puts, put)
				}
				if err := awaitFutures(puts); err != nil {
					errs[p] = err
					return
				}
				for _, m := range msgs {
					if err := m.Ack(); err != nil {
						errs[p] = err
						return
					}
					got++
					progress = time.Now()
				}
			}
			total.Add(int64(got))
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return 0, err
	}
	if err := b.nc.Flush(); err != nil {
		return 0, err
	}
	return float64(total.Load()) / time.Since(t0).Seconds(), nil
}

// spoolPartitions runs a Worker per option set (in this process, on the
// names' topology) until n tasks completed, and returns the tasks per
// second.
func (b *bench) spoolPartitions(ctx context.Context, names spool.Names, n int, opts ...[]consumer.Option) (float64, error) {
	mux := consumer.NewMux()
	for i := range partitionTypes {
		mux.HandleFunc("bench.t"+strconv.Itoa(i), func(context.Context, *consumer.Task) ([]byte, error) { return nil, nil })
	}
	workers := make([]*consumer.Worker, len(opts))
	for i, o := range opts {
		w, err := consumer.New(b.nc, mux, append([]consumer.Option{consumer.WithNames(names), consumer.WithLogger(slog.New(slog.DiscardHandler))}, o...)...)
		if err != nil {
			return 0, err
		}
		workers[i] = w
	}
	t0 := time.Now()
	for _, w := range workers {
		if err := w.Start(ctx); err != nil {
			return 0, err
		}
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		for _, w := range workers {
			if err := w.Stop(sctx); err != nil {
				b.log.Warn("stopping a worker", "error", err)
			}
		}
	}()
	var last uint64
	progress := time.Now()
	for {
		var done uint64
		for _, w := range workers {
			done += w.Stats().Total().Completed
		}
		if done >= uint64(n) {
			return float64(done) / time.Since(t0).Seconds(), nil
		}
		if done != last {
			last, progress = done, time.Now()
		} else if time.Since(progress) > stallLimit {
			return 0, fmt.Errorf("no task completed for %s (%d of %d)", stallLimit, done, n)
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(2 * time.Millisecond):
		}
	}
}
