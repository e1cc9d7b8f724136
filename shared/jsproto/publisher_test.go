package jsproto_test

import (
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/spoolq/spool/shared/jsproto"
)

type ackOf struct {
	tok uint64
	ack jsproto.PubAck
	err error
}

// The publisher routes each acknowledgement of a real server to its
// token: stored, duplicate, refused, and no stream at all.
func TestPublisherRoutesAcks(t *testing.T) {
	t.Parallel()
	_, nc, js := startServer(t)
	createStream(t, js, "PUB", jetstream.ConsumerConfig{})
	acks := make(chan ackOf, 10)
	p, err := jsproto.NewPublisher(nc, func(tok uint64, ack jsproto.PubAck, err error) {
		acks <- ackOf{tok, ack, err}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := p.Close(); err != nil {
			t.Error(err)
		}
	}()
	next := func() ackOf {
		t.Helper()
		select {
		case a := <-acks:
			return a
		case <-time.After(timeout):
			t.Fatal("no acknowledgement")
			return ackOf{}
		}
	}

	if err := p.Publish("PUB.a", []byte("one"), 1<<40); err != nil {
		t.Fatal(err)
	}
	if a := next(); a.tok != 1<<40 || a.err != nil || a.ack != (jsproto.PubAck{Seq: 1}) {
		t.Fatalf("stored: %+v", a)
	}
	m := &nats.Msg{Subject: "PUB.b", Header: nats.Header{jetstream.MsgIDHeader: {"id-1"}}, Data: []byte("two")}
	for tok := uint64(2); tok <= 3; tok++ {
		if err := p.PublishMsg(m, tok); err != nil {
			t.Fatal(err)
		}
		if m.Reply != p.Reply(tok) {
			t.Fatalf("reply %q, want %q", m.Reply, p.Reply(tok))
		}
	}
	if a := next(); a.tok != 2 || a.err != nil || a.ack != (jsproto.PubAck{Seq: 2}) {
		t.Fatalf("first of an id: %+v", a)
	}
	if a := next(); a.tok != 3 || a.err != nil || a.ack != (jsproto.PubAck{Seq: 2, Duplicate: true}) {
		t.Fatalf("duplicate: %+v", a)
	}
	refused := &nats.Msg{Subject: "PUB.c", Header: nats.Header{jetstream.ExpectedLastSeqHeader: {"99"}}}
	if err := p.PublishMsg(refused, 4); err != nil {
		t.Fatal(err)
	}
	var apiErr *jetstream.APIError
	if a := next(); a.tok != 4 || !errors.As(a.err, &apiErr) || apiErr.ErrorCode != jetstream.JSErrCodeStreamWrongLastSequence {
		t.Fatalf("refused: %+v", a)
	}
	if err := p.Publish("NOSTREAM.a", nil, 5); err != nil {
		t.Fatal(err)
	}
	if a := next(); a.tok != 5 || !errors.Is(a.err, jetstream.ErrNoStreamResponse) || !jsproto.RetryNoResponders(a.err, 0) {
		t.Fatalf("no stream: %+v", a)
	}
}

// Pending counts the acknowledgement being handled: a handler that sees
// 1 is the last of a burst.
func TestPublisherPending(t *testing.T) {
	t.Parallel()
	_, nc, js := startServer(t)
	createStream(t, js, "BURST", jetstream.ConsumerConfig{})
	var p *jsproto.Publisher
	release := make(chan struct{})
	pending := make(chan int, 3)
	p, err := jsproto.NewPublisher(nc, func(uint64, jsproto.PubAck, error) {
		<-release
		pending <- p.Pending()
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = p.Close() }()
	for tok := range uint64(3) {
		if err := p.Publish("BURST.a", nil, tok); err != nil {
			t.Fatal(err)
		}
	}
	// Every acknowledgement has come once a ping after them returns and
	// the first has been taken by the handler.
	if err := nc.FlushTimeout(timeout); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(timeout)
	for p.Pending() < 3 && time.Now().Before(deadline) {
		if err := nc.FlushTimeout(timeout); err != nil {
			t.Fatal(err)
		}
	}
	close(release)
	for _, want := range []int{3, 2, 1} {
		if got := <-pending; got != want {
			t.Fatalf("pending %d, want %d", got, want)
		}
	}
}
