package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/spoolq/spool/producer"
	spool "github.com/spoolq/spool/shared"
)

// enqueue: single-task latency (p50/p99) and batch throughput, raw and
// spool, on a fresh stream each.
func (b *bench) enqueue(ctx context.Context) error {
	payload := make([]byte, 128)
	subject, err := b.names.TaskSubject(spool.Normal, "bench")
	if err != nil {
		return err
	}
	client, err := producer.New(b.nc, producer.WithNames(b.names))
	if err != nil {
		return err
	}
	defer client.Close()

	latency := func(variant string, one func() error) error {
		if err := b.recreate(ctx); err != nil {
			return err
		}
		samples := make([]time.Duration, 0, b.cfg.latencyN)
		for range b.cfg.latencyN {
			t0 := time.Now()
			if err := one(); err != nil {
				return err
			}
			samples = append(samples, time.Since(t0))
		}
		slices.Sort(samples)
		b.add("enqueue: single task p50 (µs)", variant, us(samples[len(samples)/2]))
		b.add("enqueue: single task p99 (µs)", variant, us(samples[len(samples)*99/100]))
		return nil
	}
	if err := latency("raw", func() error {
		_, err := b.js.Publish(ctx, subject, payload)
		return err
	}); err != nil {
		return fmt.Errorf("raw publish: %w", err)
	}
	task := producer.NewTask("bench", payload)
	if err := latency("spool", func() error {
		_, err := client.Enqueue(ctx, task)
		return err
	}); err != nil {
		return fmt.Errorf("spool enqueue: %w", err)
	}

	quiet, err := producer.New(b.nc, producer.WithNames(b.names), producer.WithEnqueuedEvents(false))
	if err != nil {
		return err
	}
	defer quiet.Close()

	// measured keeps each figure of this run, by row and variant.
	measured := map[[2]string]float64{}
	add := func(row, variant string, v float64) {
		measured[[2]string{row, variant}] = v
		b.add(row, variant, v)
	}
	// measure times one way of enqueueing total tasks (run) on a fresh
	// stream, under row.
	measure := func(variant, row string, run func(total int) error) error {
		if err := b.recreate(ctx); err != nil {
			return err
		}
		runtime.GC()
		stopProfile, err := b.profileEnqueue(variant, row)
		if err != nil {
			return err
		}
		cpu0, srv0, t0 := selfCPU(), b.srv.cpu(), time.Now()
		total := b.cfg.batchN
		if b.mode == "SyncAlways" {
			total = b.cfg.batchNAlw
		}
		err = run(total)
		wall := time.Since(t0)
		stopProfile()
		if err != nil {
			return err
		}
		n := float64(total)
		add("enqueue: "+row+" (tasks/s)", variant, n/wall.Seconds())
		add("CPU per task: producer, "+row+" (µs)", variant, us(selfCPU()-cpu0)/n)
		add("CPU per task: server, "+row+" (µs)", variant, us(b.srv.cpu()-srv0)/n)
		return nil
	}
	rawMsg := func(headers bool) *nats.Msg {
		m := &nats.Msg{Subject: subject, Data: payload}
		if headers {
			m.Header = nats.Header{spool.HeaderMsgID: {spool.NewID()}}
		}
		return m
	}
	// Streaming: every task published without waiting, the window (4096)
	// bounding what is in flight, then every outcome checked: raw is
	// PublishMsgAsync + PublishAsyncComplete as a user writes it, Spool
	// EnqueueAsync + EnqueueAsyncComplete.
	rawStream := func(headers bool) func(int) error {
		return func(total int) error {
			futures := make([]jetstream.PubAckFuture, 0, total)
			for range total {
				f, err := b.js.PublishMsgAsync(rawMsg(headers), jetstream.WithStallWait(time.Minute))
				if err != nil {
					return err
				}
				futures = append(futures, f)
			}
			if err := b.filled(ctx); err != nil {
				return err
			}
			return awaitFutures(futures)
		}
	}
	// Batches: batchSize tasks at a time, each batch waited for before the
	// next (raw bounded: PublishMsgAsync and every future; Spool
	// EnqueueBatch).
	futures := make([]jetstream.PubAckFuture, b.cfg.batchSize)
	rawBatches := func(total int) error {
		for done := 0; done < total; done += len(futures) {
			for i := range futures {
				f, err := b.js.PublishMsgAsync(rawMsg(true))
				if err != nil {
					return err
				}
				futures[i] = f
			}
			if err := awaitFutures(futures); err != nil {
				return err
			}
		}
		return nil
	}
	// spoolStream streams with EnqueueAsync + EnqueueAsyncComplete, then
	// checks every outcome.
	spoolStream := func(client *producer.Client) func(int) error {
		return func(total int) error {
			pending := make([]*producer.Pending, 0, total)
			for range total {
				p, err := client.EnqueueAsync(ctx, producer.Task{Type: "bench", Payload: payload})
				if err != nil {
					return err
				}
				pending = append(pending, p)
			}
			select {
			case <-client.EnqueueAsyncComplete():
			case <-ctx.Done():
				return ctx.Err()
			}
			for _, p := range pending {
				if _, err := p.Wait(ctx); err != nil {
					return err
				}
			}
			return nil
		}
	}
	const streamRow, batchRow = "streaming", "batches waited one by one"
	// quietRow is Spool streaming from a client without enqueued events
	// (WithEnqueuedEvents(false)); its raw cells repeat streamRow's.
	const quietRow = "streaming, no enqueued events"
	for _, v := range []struct {
		variant, row string
		run          func(int) error
	}{
		{"raw", streamRow, rawStream(false)},
		{"raw+headers", streamRow, rawStream(true)},
		{"spool", streamRow, spoolStream(client)},
		{"spool", quietRow, spoolStream(quiet)},
		{"raw-bounded", batchRow, rawBatches},
		{"spool", batchRow, func(total int) error {
			tasks := make([]producer.Task, b.cfg.batchSize)
			for i := range tasks {
				tasks[i] = producer.Task{Type: "bench", Payload: payload}
			}
			for done := 0; done < total; done += len(tasks) {
				if _, err := client.EnqueueBatch(ctx, tasks); err != nil {
					return err
				}
			}
			return nil
		}},
	} {
		if err := measure(v.variant, v.row, v.run); err != nil {
			return fmt.Errorf("%s enqueue, %s: %w", v.variant, v.row, err)
		}
	}
	for _, variant := range []string{"raw", "raw+headers"} {
		for _, f := range []string{"enqueue: %s (tasks/s)", "CPU per task: producer, %s (µs)", "CPU per task: server, %s (µs)"} {
			b.add(fmt.Sprintf(f, quietRow), variant, measured[[2]string{fmt.Sprintf(f, streamRow), variant}])
		}
	}
	return b.recreate(ctx)
}

// profileEnqueue starts, with -profile, CPU profiles of the harness (the
// producer) and of the server child for one enqueue variant; the returned
// func stops both.
func (b *bench) profileEnqueue(variant, row string) (stop func(), err error) {
	if b.cfg.profileDir == "" {
		return func() {}, nil
	}
	b.profiles++
	name := fmt.Sprintf("%s-enqueue-%s-%s-%d.pprof", strings.ReplaceAll(b.mode, " ", "-"), variant, strings.ReplaceAll(row, " ", "-"), b.profiles)
	fh, err := os.Create(filepath.Join(b.cfg.profileDir, "producer-"+name))
	if err != nil {
		return nil, fmt.Errorf("creating the producer profile: %w", err)
	}
	if err := pprof.StartCPUProfile(fh); err != nil {
		_ = fh.Close()
		return nil, fmt.Errorf("starting the producer profile: %w", err)
	}
	b.srv.profile = filepath.Join(b.cfg.profileDir, "server-"+name)
	b.srv.startProfile()
	return func() {
		pprof.StopCPUProfile()
		_ = fh.Close()
		b.srv.stopProfile()
	}, nil
}

// awaitFutures waits for every publish acknowledgement; the first error
// ends it.
func awaitFutures(futures []jetstream.PubAckFuture) error {
	for _, f := range futures {
		select {
		case <-f.Ok():
		case err := <-f.Err():
			return err
		}
	}
	return nil
}

func us(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }
