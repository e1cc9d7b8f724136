package jsproto

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/nats-io/nats.go"
)

// AckHandler receives the acknowledgement of the publish sent with token:
// what was stored, or why not (see ParsePubAck). It runs on the
// publisher's subscription goroutine, one acknowledgement at a time.
type AckHandler func(token uint64, ack PubAck, err error)

// Publisher publishes messages to JetStream and routes their
// acknowledgements. Each publish carries the reply subject
// <inbox>.<token>, the token (chosen by the caller, unique among its
// publishes in flight) in base 36; one wildcard subscription, made by
// NewPublisher and ended by Close, receives every acknowledgement and
// hands it to the handler with its token.
//
// The subscription has no pending limits: the caller bounds its publishes
// in flight, and a dropped acknowledgement would cost a timeout. What a
// missing acknowledgement means (a lost connection never answers) is the
// caller's to decide: it knows the deadline of each token.
type Publisher struct {
	nc     *nats.Conn
	prefix string // of reply subjects, with its trailing dot
	sub    *nats.Subscription
	handle AckHandler
}

// NewPublisher subscribes to the acknowledgements of a new inbox.
func NewPublisher(nc *nats.Conn, handle AckHandler) (*Publisher, error) {
	p := &Publisher{nc: nc, prefix: nc.NewInbox() + ".", handle: handle}
	sub, err := SubscribeUnbounded(nc, p.prefix+"*", p.onAck)
	if err != nil {
		return nil, fmt.Errorf("subscribing to publish acknowledgements: %w", err)
	}
	p.sub = sub
	return p, nil
}

// Publish publishes data to subject with the reply subject of token.
func (p *Publisher) Publish(subject string, data []byte, token uint64) error {
	return p.nc.PublishRequest(subject, p.Reply(token), data)
}

// PublishMsg publishes m (headers included) with the reply subject of
// token, which it sets as m.Reply.
func (p *Publisher) PublishMsg(m *nats.Msg, token uint64) error {
	m.Reply = p.Reply(token)
	return p.nc.PublishMsg(m)
}

// Reply is the reply subject of token.
func (p *Publisher) Reply(token uint64) string {
	return p.prefix + strconv.FormatUint(token, 36)
}

// Pending is the number of acknowledgements received and not yet handled,
// counting the one being handled: in a handler, 1 means no further
// acknowledgement is queued, so a burst of them has ended.
func (p *Publisher) Pending() int {
	n, _, err := p.sub.Pending()
	if err != nil {
		return 0
	}
	return n
}

func (p *Publisher) onAck(m *nats.Msg) {
	rest, ok := strings.CutPrefix(m.Subject, p.prefix)
	if !ok {
		return
	}
	tok, err := strconv.ParseUint(rest, 36, 64)
	if err != nil {
		return
	}
	ack, err := ParsePubAck(m)
	p.handle(tok, ack, err)
}

// Close ends the subscription: acknowledgements still awaited are not
// handled. A connection closed already is no error.
func (p *Publisher) Close() error {
	if err := p.sub.Unsubscribe(); err != nil && !errors.Is(err, nats.ErrConnectionClosed) {
		return fmt.Errorf("unsubscribing from publish acknowledgements: %w", err)
	}
	return nil
}

// SubscribeUnbounded subscribes cb to subject with no limit on the
// messages waiting for it: what arrives there answers the subscriber's own
// requests, whose number the subscriber bounds, and a dropped one would
// strand a publish or a pulled task until it times out.
func SubscribeUnbounded(nc *nats.Conn, subject string, cb nats.MsgHandler) (*nats.Subscription, error) {
	sub, err := nc.Subscribe(subject, cb)
	if err != nil {
		return nil, err
	}
	if err := sub.SetPendingLimits(-1, -1); err != nil {
		_ = sub.Unsubscribe()
		return nil, err
	}
	return sub, nil
}
