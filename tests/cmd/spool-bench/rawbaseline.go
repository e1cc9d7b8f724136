package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	spool "github.com/spoolq/spool/shared"
)

// stallLimit fails a measurement that makes no progress.
const stallLimit = time.Minute

// rawAckSync is the raw baseline of the durable mode: Consume with pulls
// of conc messages, each acked with DoubleAck (the server confirms the
// ack is applied, which on a WorkQueue stream removes the message and,
// under SyncAlways, fsyncs the removal) by one of conc goroutines: as many
// in flight as the worker's slots, each waiting for its ack to be durable
// as a Spool attempt waits for its result to be.
func rawAckSync(ctx context.Context, js jetstream.JetStream, names spool.Names, f consumeFlags, rep *consumeReport) error {
	cons, err := js.Consumer(ctx, names.TaskStream(), names.Consumer(spool.Normal))
	if err != nil {
		return fmt.Errorf("binding consumer: %w", err)
	}
	msgs := make(chan jetstream.Msg, f.conc)
	var got atomic.Int64
	var ackErr atomic.Value
	done := make(chan struct{})
	var wg sync.WaitGroup
	for range f.conc {
		wg.Go(func() {
			for m := range msgs {
				actx, cancel := context.WithTimeout(ctx, 30*time.Second)
				if err := m.DoubleAck(actx); err != nil {
					ackErr.CompareAndSwap(nil, err)
				}
				cancel()
				if got.Add(1) == int64(f.n) {
					close(done)
				}
			}
		})
	}
	defer wg.Wait()
	defer close(msgs)
	w := startWindow()
	cc, err := cons.Consume(func(m jetstream.Msg) { msgs <- m }, jetstream.PullMaxMessages(f.conc))
	if err != nil {
		return fmt.Errorf("consuming: %w", err)
	}
	defer cc.Stop()
	select {
	case <-done:
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(10 * time.Minute):
		return fmt.Errorf("%d of %d acked in 10 minutes", got.Load(), f.n)
	}
	w.end(rep, f.n)
	cc.Drain()
	<-cc.Closed()
	if err, _ := ackErr.Load().(error); err != nil {
		return fmt.Errorf("acking: %w", err)
	}
	return nil
}

// rawConsume is the raw baseline a user writes first with nats.go:
// Consume with its defaults (pulls of up to 500 messages, the next pull
// once half of them are handled, heartbeats) and Ack in the callback.
// bounded limits the pulls to conc messages (PullMaxMessages), the same
// number in flight as a worker's slots. Every message delivered is acked
// (those past n too, until the drained consumer closes: unacked ones would
// come back to a later run), the window ends at n.
func rawConsume(ctx context.Context, js jetstream.JetStream, names spool.Names, f consumeFlags, rep *consumeReport, bounded bool) error {
	name := f.consumer
	if name == "" {
		name = names.Consumer(spool.Normal)
	}
	cons, err := js.Consumer(ctx, names.TaskStream(), name)
	if err != nil {
		return fmt.Errorf("binding consumer: %w", err)
	}
	var opts []jetstream.PullConsumeOpt
	if bounded {
		opts = append(opts, jetstream.PullMaxMessages(f.conc))
	}
	// A paced drain acks each task on the next tick: Consume calls the
	// callback for one message at a time, so this is a rate limit.
	var pace <-chan time.Time
	if f.rate > 0 {
		tick := time.NewTicker(time.Second / time.Duration(f.rate))
		defer tick.Stop()
		pace = tick.C
	}
	var got atomic.Int64
	var ackErr atomic.Value
	done := make(chan struct{})
	w := startWindow()
	cc, err := cons.Consume(func(m jetstream.Msg) {
		if pace != nil {
			<-pace
		}
		if err := m.Ack(); err != nil {
			ackErr.CompareAndSwap(nil, err)
		}
		if got.Add(1) == int64(f.n) {
			close(done)
		}
	}, opts...)
	if err != nil {
		return fmt.Errorf("consuming: %w", err)
	}
	defer cc.Stop() // a no-op once drained
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	last, progress := int64(0), time.Now()
wait:
	for {
		select {
		case <-done:
			break wait
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
		if n := got.Load(); n != last {
			last, progress = n, time.Now()
		} else if time.Since(progress) > stallLimit {
			return fmt.Errorf("no task consumed for %s (%d of %d done)", stallLimit, n, f.n)
		}
	}
	fctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := js.Conn().FlushWithContext(fctx); err != nil {
		return fmt.Errorf("flushing: %w", err)
	}
	w.end(rep, f.n)
	cc.Drain()
	select {
	case <-cc.Closed():
	case <-fctx.Done():
	}
	if err := js.Conn().FlushWithContext(fctx); err != nil {
		return fmt.Errorf("flushing: %w", err)
	}
	if err, _ := ackErr.Load().(error); err != nil {
		return fmt.Errorf("acking: %w", err)
	}
	return nil
}

// rawResults is the raw baseline that writes results, as a user would
// with nats.go: Consume with its defaults; the callback publishes a small
// result document to the message's key of the results bucket with
// PublishAsync (nats.go's default window, waiting for room when it is
// full) and hands the message with its
// future to a goroutine that acks it once the result is stored, so no ack
// precedes its result, as in Spool. The task id is the stream sequence,
// as Spool's is for a task published without one.
//
// With duty it does what Spool's promise asks of a plain task instead
// (spoolWrites): the floor of a worker with events on.
func rawResults(ctx context.Context, js jetstream.JetStream, names spool.Names, f consumeFlags, duty bool, rep *consumeReport) error {
	cons, err := js.Consumer(ctx, names.TaskStream(), names.Consumer(spool.Normal))
	if err != nil {
		return fmt.Errorf("binding consumer: %w", err)
	}
	type stored struct {
		m   jetstream.Msg
		put jetstream.PubAckFuture
	}
	queue := make(chan stored, 4096)
	var got atomic.Uint64
	var ackErr atomic.Value
	var wg sync.WaitGroup
	wg.Go(func() {
		for s := range queue {
			select {
			case <-s.put.Ok():
				if err := s.m.Ack(); err != nil {
					ackErr.CompareAndSwap(nil, err)
				}
			case err := <-s.put.Err():
				ackErr.CompareAndSwap(nil, fmt.Errorf("storing a result: %w", err))
			}
			got.Add(1)
		}
	})
	w := startWindow()
	cc, err := cons.Consume(func(m jetstream.Msg) {
		md, err := m.Metadata()
		if err != nil {
			ackErr.CompareAndSwap(nil, err)
			return
		}
		id := strconv.FormatUint(md.Sequence.Stream, 10)
		var put jetstream.PubAckFuture
		if duty {
			put, err = spoolWrites(js, names, m, md, id)
		} else {
			doc := fmt.Appendf(nil, `{"id":%q,"state":"completed","finished_at":%q}`, id, time.Now().UTC().Format(time.RFC3339Nano))
			// A full window waits for room (back-pressure) rather than
			// failing after nats.go's default 200ms, which SyncAlways exceeds.
			put, err = js.PublishAsync(names.ResultSubject(id), doc, jetstream.WithStallWait(stallLimit))
		}
		if err != nil {
			ackErr.CompareAndSwap(nil, fmt.Errorf("storing a result: %w", err))
			return
		}
		queue <- stored{m, put}
	})
	if err != nil {
		close(queue)
		wg.Wait()
		return fmt.Errorf("consuming: %w", err)
	}
	if err := drainCounted(ctx, js, cc, f.n, got.Load, w, rep); err != nil {
		return err
	}
	close(queue)
	wg.Wait()
	// The last acks leave before the process ends.
	fctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := js.Conn().FlushWithContext(fctx); err != nil {
		return fmt.Errorf("flushing: %w", err)
	}
	if err, _ := ackErr.Load().(error); err != nil {
		return fmt.Errorf("acking: %w", err)
	}
	return nil
}

// drainCounted waits until count reaches n, ends the window there, and
// drains cc: every message delivered is acked once its result is stored
// (those past n too), since unacked ones would come back to a later run.
// Under SyncAlways the messages in hand (a pull of up to 500, and a
// queue) take seconds to store their results.
func drainCounted(ctx context.Context, js jetstream.JetStream, cc jetstream.ConsumeContext, n int, count func() uint64, w window, rep *consumeReport) error {
	err := awaitCount(ctx, n, "acked", count)
	if err == nil {
		fctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err = js.Conn().FlushWithContext(fctx)
		cancel()
		w.end(rep, n)
	}
	cc.Drain()
	select {
	case <-cc.Closed():
	case <-time.After(stallLimit):
		return errors.Join(err, fmt.Errorf("the drained consumer did not close in %s", stallLimit))
	}
	return err
}

// rawPickup is a waiting Fetch(1) loop: enqueue (stream time) → delivery.
func rawPickup(ctx context.Context, js jetstream.JetStream, names spool.Names, f consumeFlags, rep *consumeReport) error {
	cons, err := js.Consumer(ctx, names.TaskStream(), names.Consumer(spool.Normal))
	if err != nil {
		return fmt.Errorf("binding consumer: %w", err)
	}
	samples := make([]time.Duration, 0, f.n)
	w := startWindow()
	for len(samples) < f.n {
		b, err := cons.Fetch(1, jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			return fmt.Errorf("fetching: %w", err)
		}
		for m := range b.Messages() {
			md, err := m.Metadata()
			if err != nil {
				return fmt.Errorf("metadata: %w", err)
			}
			samples = append(samples, time.Since(md.Timestamp))
			if err := m.Ack(); err != nil {
				return fmt.Errorf("acking: %w", err)
			}
		}
	}
	w.end(rep, len(samples))
	quantiles(samples, rep)
	return nil
}

// rawShares round-robins FetchNoWait(conc) over the five consumers.
func rawShares(ctx context.Context, js jetstream.JetStream, names spool.Names, f consumeFlags, rep *consumeReport) error {
	var cons [5]jetstream.Consumer
	for _, p := range spool.Priorities {
		c, err := js.Consumer(ctx, names.TaskStream(), names.Consumer(p))
		if err != nil {
			return fmt.Errorf("binding consumer: %w", err)
		}
		cons[p] = c
	}
	var order []spool.Priority
	var starts []time.Time
	start := time.Now()
	w := startWindow()
	for i := 0; len(order) < f.n; i++ {
		p := spool.Priorities[i%5]
		b, err := cons[p].FetchNoWait(f.conc)
		if err != nil {
			return fmt.Errorf("fetching: %w", err)
		}
		for m := range b.Messages() {
			order = append(order, p)
			starts = append(starts, time.Now())
			if err := m.Ack(); err != nil {
				return fmt.Errorf("acking: %w", err)
			}
		}
	}
	w.end(rep, len(order))
	shares(order, starts, start, f.n, rep)
	return nil
}

// spoolWrites is what Spool's contract asks of a plain task that
// completes, written as directly as nats.go allows: the started event,
// the completed result document Spool stores (its fields, encoded by
// Spool's encoder), written only if the task has none yet
// (Nats-Expected-Last-Subject-Sequence: 0, which keeps a cancellation
// stored meanwhile), and the completed event. It returns the write's
// future; the events are core publishes, as Spool's.
func spoolWrites(js jetstream.JetStream, names spool.Names, m jetstream.Msg, md *jetstream.MsgMetadata, id string) (jetstream.PubAckFuture, error) {
	_, typ, _ := names.ParseTaskSubject(m.Subject())
	started := time.Now()
	doc := spool.Result{ID: id, Type: typ, Priority: spool.Normal, State: spool.StateProcessing, Attempts: 1,
		EnqueuedAt: md.Timestamp, StartedAt: &started, Worker: "raw"}
	body, ok := spool.AppendResult(nil, &doc)
	if !ok {
		return nil, fmt.Errorf("encoding the result of task %s", id)
	}
	_ = js.Conn().Publish(names.EventSubject(spool.EventStarted, doc.Priority, id, typ), spool.AppendEvent(nil, spool.EventStarted, started, body))
	finished := time.Now()
	doc.State, doc.FinishedAt = spool.StateCompleted, &finished
	if body, ok = spool.AppendResult(body[:0], &doc); !ok {
		return nil, fmt.Errorf("encoding the result of task %s", id)
	}
	w := &nats.Msg{Subject: names.ResultSubject(id), Data: body, Header: nats.Header{jetstream.ExpectedLastSubjSeqHeader: {"0"}}}
	put, err := js.PublishMsgAsync(w, jetstream.WithStallWait(stallLimit))
	if err != nil {
		return nil, err
	}
	_ = js.Conn().Publish(names.EventSubject(spool.EventCompleted, doc.Priority, id, typ), spool.AppendEvent(nil, spool.EventCompleted, finished, body))
	return put, nil
}
