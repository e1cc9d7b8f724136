package jsproto_test

import (
	"fmt"
	"strconv"
	"sync"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/spoolq/spool/shared/jsproto"
)

// Publishing a batch of messages and waiting for all their
// acknowledgements: jsproto's Publisher against nats.go's PublishAsync.
//
//	go test -run '^$' -bench Publish -benchmem ./jsproto
func BenchmarkPublish(b *testing.B) {
	const batch = 100
	payload := make([]byte, 128)
	b.Run(fmt.Sprintf("jsproto/batch=%d", batch), func(b *testing.B) {
		_, nc, js := startServer(b)
		createStream(b, js, "BENCH", jetstream.ConsumerConfig{})
		var wg sync.WaitGroup
		var failed error
		p, err := jsproto.NewPublisher(nc, func(_ uint64, _ jsproto.PubAck, err error) {
			if err != nil {
				failed = err
			}
			wg.Done()
		})
		if err != nil {
			b.Fatal(err)
		}
		defer func() { _ = p.Close() }()
		var tok uint64
		b.ReportAllocs()
		for b.Loop() {
			wg.Add(batch)
			for range batch {
				tok++
				if err := p.Publish("BENCH.a", payload, tok); err != nil {
					b.Fatal(err)
				}
			}
			wg.Wait()
		}
		if failed != nil {
			b.Fatal(failed)
		}
	})
	b.Run(fmt.Sprintf("PublishAsync/batch=%d", batch), func(b *testing.B) {
		_, _, js := startServer(b)
		createStream(b, js, "BENCH", jetstream.ConsumerConfig{})
		futures := make([]jetstream.PubAckFuture, batch)
		b.ReportAllocs()
		for b.Loop() {
			for i := range batch {
				f, err := js.PublishAsync("BENCH.a", payload)
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
		}
	})
}

// Pulling a batch of messages with a no-wait request and reading their
// metadata: a jsproto request on a long-lived subscription against
// nats.go's FetchNoWait and Fetch. The consumer acks nothing, so what is
// measured is the pull.
//
//	go test -run '^$' -bench Pull -benchmem ./jsproto
func BenchmarkPull(b *testing.B) {
	for _, batch := range []int{1, 32} {
		b.Run(fmt.Sprintf("jsproto/batch=%d", batch), func(b *testing.B) {
			nc, js := pullEnv(b)
			// done receives nil once the batch has come, or a status.
			done := make(chan error, 1)
			got := 0 // only the subscription's goroutine uses it
			inbox := nc.NewInbox()
			sub, err := jsproto.SubscribeUnbounded(nc, inbox+".*", func(m *nats.Msg) {
				if st, ok := jsproto.CheckStatus(m); ok {
					done <- fmt.Errorf("status %s", st)
					return
				}
				if _, err := jsproto.NewMsg(m).Metadata(); err != nil {
					done <- err
					return
				}
				if got++; got == batch {
					got = 0
					done <- nil
				}
			})
			if err != nil {
				b.Fatal(err)
			}
			defer func() { _ = sub.Unsubscribe() }()
			next := jsproto.NextSubject("PULL", "c")
			var id uint64
			b.ReportAllocs()
			for b.Loop() {
				b.StopTimer()
				fill(b, js, batch)
				b.StartTimer()
				id++
				body := jsproto.PullRequest{Batch: batch, NoWait: true}.AppendJSON(nil)
				if err := nc.PublishRequest(next, inbox+"."+strconv.FormatUint(id, 36), body); err != nil {
					b.Fatal(err)
				}
				if err := <-done; err != nil {
					b.Fatal(err)
				}
			}
		})
		for _, api := range []string{"FetchNoWait", "Fetch"} {
			b.Run(fmt.Sprintf("%s/batch=%d", api, batch), func(b *testing.B) {
				_, js := pullEnv(b)
				c, err := js.Consumer(testContext(b), "PULL", "c")
				if err != nil {
					b.Fatal(err)
				}
				b.ReportAllocs()
				for b.Loop() {
					b.StopTimer()
					fill(b, js, batch)
					b.StartTimer()
					var msgs jetstream.MessageBatch
					if api == "Fetch" {
						msgs, err = c.Fetch(batch)
					} else {
						msgs, err = c.FetchNoWait(batch)
					}
					if err != nil {
						b.Fatal(err)
					}
					n := 0
					for m := range msgs.Messages() {
						if _, err := m.Metadata(); err != nil {
							b.Fatal(err)
						}
						n++
					}
					if err := msgs.Error(); err != nil || n != batch {
						b.Fatalf("%d of %d messages: %v", n, batch, err)
					}
				}
			})
		}
	}
}

// pullEnv is a server with a stream PULL and its consumer c, which acks
// nothing.
func pullEnv(b *testing.B) (*nats.Conn, jetstream.JetStream) {
	_, nc, js := startServer(b)
	createStream(b, js, "PULL", jetstream.ConsumerConfig{})
	ctx := testContext(b)
	if _, err := js.UpdateConsumer(ctx, "PULL", jetstream.ConsumerConfig{Durable: "c", AckPolicy: jetstream.AckNonePolicy}); err != nil {
		// The ack policy cannot change: make the consumer again.
		if err := js.DeleteConsumer(ctx, "PULL", "c"); err != nil {
			b.Fatal(err)
		}
		if _, err := js.CreateConsumer(ctx, "PULL", jetstream.ConsumerConfig{Durable: "c", AckPolicy: jetstream.AckNonePolicy}); err != nil {
			b.Fatal(err)
		}
	}
	return nc, js
}

// fill stores n messages for the next pull, and waits until the consumer
// has them.
func fill(b *testing.B, js jetstream.JetStream, n int) {
	ctx := testContext(b)
	for range n {
		if _, err := js.PublishAsync("PULL.a", []byte("task")); err != nil {
			b.Fatal(err)
		}
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-ctx.Done():
		b.Fatal("messages not stored")
	}
	c, err := js.Consumer(ctx, "PULL", "c")
	if err != nil {
		b.Fatal(err)
	}
	for c.CachedInfo().NumPending < uint64(n) {
		if _, err := c.Info(ctx); err != nil {
			b.Fatal(err)
		}
	}
}
