package consumer

import (
	"context"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// pulledMsg is a task delivered on the puller's subscription, as a
// jetstream.Msg. Acknowledgements are the JetStream ack protocol on the
// message's reply subject (nats.go's message methods send them).
type pulledMsg struct {
	m  *nats.Msg
	md *jetstream.MsgMetadata // parsed once
}

var _ jetstream.Msg = (*pulledMsg)(nil)

func (p *pulledMsg) Metadata() (*jetstream.MsgMetadata, error) {
	if p.md != nil {
		return p.md, nil
	}
	md, err := p.m.Metadata()
	if err != nil {
		return nil, err
	}
	p.md = &jetstream.MsgMetadata{
		Sequence:     jetstream.SequencePair{Consumer: md.Sequence.Consumer, Stream: md.Sequence.Stream},
		NumDelivered: md.NumDelivered,
		NumPending:   md.NumPending,
		Timestamp:    md.Timestamp,
		Stream:       md.Stream,
		Consumer:     md.Consumer,
		Domain:       md.Domain,
	}
	return p.md, nil
}

func (p *pulledMsg) Data() []byte                           { return p.m.Data }
func (p *pulledMsg) Headers() nats.Header                   { return p.m.Header }
func (p *pulledMsg) Subject() string                        { return p.m.Subject }
func (p *pulledMsg) Reply() string                          { return p.m.Reply }
func (p *pulledMsg) Ack() error                             { return p.m.Ack() }
func (p *pulledMsg) DoubleAck(ctx context.Context) error    { return p.m.AckSync(nats.Context(ctx)) }
func (p *pulledMsg) Nak() error                             { return p.m.Nak() }
func (p *pulledMsg) NakWithDelay(delay time.Duration) error { return p.m.NakWithDelay(delay) }
func (p *pulledMsg) InProgress() error                      { return p.m.InProgress() }
func (p *pulledMsg) Term() error                            { return p.m.Term() }

// TermWithReason terminates the message with a reason the server puts in
// its advisory (nats.go's message has no method for it).
func (p *pulledMsg) TermWithReason(reason string) error {
	if reason == "" {
		return p.m.Term()
	}
	return p.m.Respond([]byte("+TERM " + reason))
}
