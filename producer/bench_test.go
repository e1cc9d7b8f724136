package producer_test

import (
	"context"
	"log/slog"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/spoolq/spool/producer"
	spool "github.com/spoolq/spool/shared"
	"github.com/spoolq/spool/streams"
)

// benchPayload is the body of every benchmark task.
var benchPayload = make([]byte, 128)

// benchBatch is the number of tasks per batch in BenchmarkBatchEnqueue.
const benchBatch = 1000

// benchEnv starts one file-storage server for all sub-benchmarks, so spool
// and raw publish into the same stream of the same server.
func benchEnv(b *testing.B) (*env, *producer.Client, jetstream.JetStream) {
	e := startEnv(b)
	client, err := producer.New(e.nc) // no logger: measure the library, not the test log
	if err != nil {
		b.Fatal(err)
	}
	raw, err := jetstream.New(e.nc, jetstream.WithPublishAsyncMaxPending(producer.DefaultPublishWindow))
	if err != nil {
		b.Fatal(err)
	}
	return e, client, raw
}

// purge recreates the task stream, so every sub-benchmark starts from an
// empty stream with an empty duplicate-tracking table (a purge keeps the
// latter, which would slow whichever sub-benchmark runs later).
func purge(b *testing.B, e *env) {
	b.Helper()
	ctx := context.Background()
	if err := e.js.DeleteStream(ctx, e.names.TaskStream()); err != nil {
		b.Fatal(err)
	}
	topo, err := streams.New(e.names, streams.Settings{})
	if err != nil {
		b.Fatal(err)
	}
	if err := streams.Provision(ctx, e.js, topo, slog.New(slog.DiscardHandler)); err != nil {
		b.Fatal(err)
	}
}

func reportRate(b *testing.B, tasks int) {
	b.ReportMetric(float64(tasks)/b.Elapsed().Seconds(), "tasks/s")
}

// BenchmarkEnqueue measures one synchronous enqueue (publish and wait for
// the ack): Spool's Enqueue beside a raw js.Publish to the same subject.
func BenchmarkEnqueue(b *testing.B) {
	e, client, raw := benchEnv(b)
	ctx := context.Background()
	task := producer.NewTask("bench.single", benchPayload)
	b.Run("spool", func(b *testing.B) {
		purge(b, e)
		n := 0
		for b.Loop() {
			if _, err := client.Enqueue(ctx, task); err != nil {
				b.Fatal(err)
			}
			n++
		}
		reportRate(b, n)
	})
	b.Run("raw", func(b *testing.B) {
		purge(b, e)
		n := 0
		for b.Loop() {
			if _, err := raw.Publish(ctx, "spool.tasks.normal.bench.single", benchPayload); err != nil {
				b.Fatal(err)
			}
			n++
		}
		reportRate(b, n)
	})
}

// BenchmarkBatchEnqueue measures batches of benchBatch tasks: Spool's
// EnqueueBatch beside raw js.PublishAsync with the same window, each
// waiting for every ack.
func BenchmarkBatchEnqueue(b *testing.B) {
	e, client, raw := benchEnv(b)
	ctx := context.Background()
	tasks := make([]producer.Task, benchBatch)
	for i := range tasks {
		tasks[i] = producer.Task{Type: "bench.batch", Payload: benchPayload}
	}
	b.Run("spool", func(b *testing.B) {
		purge(b, e)
		n := 0
		for b.Loop() {
			if _, err := client.EnqueueBatch(ctx, tasks); err != nil {
				b.Fatal(err)
			}
			n += benchBatch
		}
		reportRate(b, n)
	})
	b.Run("raw", func(b *testing.B) {
		rawBatches(b, e, raw, func(*nats.Msg) {})
	})
	// raw_headers adds what the contract puts on every task, Nats-Msg-Id and
	// Spool-Task-Id, to the raw publishes: the server's dedup bookkeeping
	// is most of the gap between spool and raw.
	b.Run("raw_headers", func(b *testing.B) {
		rawBatches(b, e, raw, func(m *nats.Msg) {
			id := spool.NewID()
			m.Header = nats.Header{spool.HeaderMsgID: {id}, spool.HeaderTaskID: {id}}
		})
	})
}

// rawBatches publishes batches of benchBatch messages with PublishAsync and
// waits for every ack; decorate adds headers.
func rawBatches(b *testing.B, e *env, raw jetstream.JetStream, decorate func(*nats.Msg)) {
	purge(b, e)
	n := 0
	futures := make([]jetstream.PubAckFuture, benchBatch)
	for b.Loop() {
		for i := range futures {
			m := &nats.Msg{Subject: "spool.tasks.normal.bench.batch", Data: benchPayload}
			decorate(m)
			f, err := raw.PublishMsgAsync(m)
			if err != nil {
				b.Fatal(err)
			}
			futures[i] = f
		}
		for _, f := range futures {
			select {
			case <-f.Ok():
			case err := <-f.Err():
				b.Fatal(err)
			}
		}
		n += benchBatch
	}
	reportRate(b, n)
}

// BenchmarkEnqueueAsync streams tasks with EnqueueAsync (the window
// bounding what is in flight) and waits for all of them.
func BenchmarkEnqueueAsync(b *testing.B) {
	e, client, _ := benchEnv(b)
	ctx := context.Background()
	purge(b, e)
	n := 0
	pending := make([]*producer.Pending, 0, benchBatch)
	for b.Loop() {
		p, err := client.EnqueueAsync(ctx, producer.Task{Type: "bench.batch", Payload: benchPayload})
		if err != nil {
			b.Fatal(err)
		}
		if pending = append(pending, p); len(pending) == cap(pending) {
			for _, p := range pending {
				if _, err := p.Wait(ctx); err != nil {
					b.Fatal(err)
				}
			}
			pending = pending[:0]
		}
		n++
	}
	reportRate(b, n)
}
