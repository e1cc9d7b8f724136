package jsproto

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// ParseAckSubject reads a delivery's metadata from its ack subject, as
// nats.go does, without its allocations:
//
//	$JS.ACK.<stream>.<consumer>.<delivered>.<sseq>.<cseq>.<tm>.<pending>
//	$JS.ACK.<domain>.<account hash>.<stream>.<consumer>.<delivered>.<sseq>.<cseq>.<tm>.<pending>[.<token>...]
//
// (the second form is the newer one; a domain "_" means none). A subject
// of neither form is jetstream.ErrNotJSMessage.
func ParseAckSubject(subject string) (*jetstream.MsgMetadata, error) {
	md := &jetstream.MsgMetadata{}
	if err := parseAckSubject(subject, md); err != nil {
		return nil, err
	}
	return md, nil
}

// parseAckSubject is ParseAckSubject into md.
func parseAckSubject(subject string, md *jetstream.MsgMetadata) error {
	rest, ok := strings.CutPrefix(subject, "$JS.ACK.")
	if !ok {
		return fmt.Errorf("%w: reply %q is not a JetStream ack subject", jetstream.ErrNotJSMessage, subject)
	}
	var tok [10]string
	n := 0
	for n < len(tok) {
		var t string
		t, rest, ok = strings.Cut(rest, ".")
		tok[n] = t
		n++
		if !ok {
			break
		}
	}
	var domain string
	var f []string // stream, consumer, delivered, sseq, cseq, tm, pending
	switch {
	case n == 7 && !ok:
		f = tok[:7]
	case n >= 9:
		if domain = tok[0]; domain == "_" {
			domain = ""
		}
		f = tok[2:9]
	default:
		return fmt.Errorf("%w: reply %q is not a JetStream ack subject", jetstream.ErrNotJSMessage, subject)
	}
	*md = jetstream.MsgMetadata{
		Stream:       f[0],
		Consumer:     f[1],
		NumDelivered: parseCount(f[2]),
		Timestamp:    time.Unix(0, int64(parseCount(f[5]))),
		NumPending:   parseCount(f[6]),
		Domain:       domain,
	}
	md.Sequence.Stream = parseCount(f[3])
	md.Sequence.Consumer = parseCount(f[4])
	return nil
}

// parseCount reads a decimal token of an ack subject; 0 when it is not one.
func parseCount(s string) uint64 {
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0
	}
	return n
}

// Msg is a message a pull request delivered on a subscription of one's
// own, as a jetstream.Msg. Acknowledgements are the JetStream ack protocol
// on the message's reply subject (nats.go's message methods send them).
type Msg struct {
	m *nats.Msg
	// md is parsed once, on the first call of Metadata; inside the Msg,
	// it costs no allocation of its own.
	md     jetstream.MsgMetadata
	parsed bool
}

var _ jetstream.Msg = (*Msg)(nil)

// NewMsg wraps a delivered message.
func NewMsg(m *nats.Msg) *Msg { return &Msg{m: m} }

// Metadata reads the delivery's metadata from its ack subject (once).
func (p *Msg) Metadata() (*jetstream.MsgMetadata, error) {
	if p.parsed {
		return &p.md, nil
	}
	if err := parseAckSubject(p.m.Reply, &p.md); err != nil {
		return nil, err
	}
	p.parsed = true
	return &p.md, nil
}

func (p *Msg) Data() []byte                           { return p.m.Data }
func (p *Msg) Headers() nats.Header                   { return p.m.Header }
func (p *Msg) Subject() string                        { return p.m.Subject }
func (p *Msg) Reply() string                          { return p.m.Reply }
func (p *Msg) Ack() error                             { return p.m.Ack() }
func (p *Msg) DoubleAck(ctx context.Context) error    { return p.m.AckSync(nats.Context(ctx)) }
func (p *Msg) Nak() error                             { return p.m.Nak() }
func (p *Msg) NakWithDelay(delay time.Duration) error { return p.m.NakWithDelay(delay) }
func (p *Msg) InProgress() error                      { return p.m.InProgress() }
func (p *Msg) Term() error                            { return p.m.Term() }

// TermWithReason terminates the message with a reason the server puts in
// its advisory (nats.go's message has no method for it).
func (p *Msg) TermWithReason(reason string) error {
	if reason == "" {
		return p.m.Term()
	}
	return p.m.Respond([]byte("+TERM " + reason))
}
