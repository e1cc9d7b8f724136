package jsproto

import (
	"bytes"
	"encoding/json"
	"errors"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// PubAck is what a publish acknowledgement says of a stored message. The
// stream's name is checked to be there but not returned, which would cost
// an allocation per message.
type PubAck struct {
	Seq       uint64 // stream sequence
	Duplicate bool   // the message was a duplicate of one stored already
}

// Retries of a publish answered by no responders (no stream listening, as
// during a stream leader election), as nats.go's PublishAsync does.
const (
	NoResponderRetries = jetstream.DefaultPubRetryAttempts
	NoResponderWait    = jetstream.DefaultPubRetryWait
)

// RetryNoResponders reports whether a publish whose acknowledgement was
// err, after retries earlier retries, is to be sent again after
// NoResponderWait.
func RetryNoResponders(err error, retries int) bool {
	return errors.Is(err, jetstream.ErrNoStreamResponse) && retries < NoResponderRetries
}

var (
	ackStreamHead = []byte(`{"stream":`)
	ackErrorKey   = []byte(`"error"`)
	ackSeqKey     = []byte(`"seq":`)
	ackDupKey     = []byte(`"duplicate":`)
	ackTrue       = []byte(`true`)
)

// ParsePubAck reads a JetStream publish acknowledgement: the stream
// sequence and whether it was a duplicate, or why the message was not
// stored, with nats.go's errors: jetstream.ErrNoStreamResponse for a 503
// (nothing listens on the subject), a *jetstream.APIError (its Code,
// ErrorCode and Description) for a refusal, jetstream.ErrInvalidJSAck for
// anything else. The common reply, {"stream":...,"seq":...}, is read
// without decoding it.
func ParsePubAck(m *nats.Msg) (PubAck, error) {
	if len(m.Data) == 0 {
		if m.Header.Get("Status") == "503" {
			return PubAck{}, jetstream.ErrNoStreamResponse
		}
		return PubAck{}, jetstream.ErrInvalidJSAck
	}
	if bytes.HasPrefix(m.Data, ackStreamHead) && !bytes.Contains(m.Data, ackErrorKey) {
		if k := bytes.Index(m.Data, ackSeqKey); k >= 0 {
			if seq, ok := leadingUint(afterSpace(m.Data[k+len(ackSeqKey):])); ok {
				return PubAck{Seq: seq, Duplicate: ackDuplicate(m.Data)}, nil
			}
		}
	}
	var r struct {
		Error     *jetstream.APIError `json:"error"`
		Stream    string              `json:"stream"`
		Sequence  uint64              `json:"seq"`
		Duplicate bool                `json:"duplicate"`
	}
	if err := json.Unmarshal(m.Data, &r); err != nil {
		return PubAck{}, jetstream.ErrInvalidJSAck
	}
	if r.Error != nil {
		return PubAck{}, r.Error
	}
	if r.Stream == "" {
		return PubAck{}, jetstream.ErrInvalidJSAck
	}
	return PubAck{Seq: r.Sequence, Duplicate: r.Duplicate}, nil
}

// ackDuplicate reads the duplicate flag of an acknowledgement (the server
// writes it as "duplicate": true).
func ackDuplicate(data []byte) bool {
	k := bytes.Index(data, ackDupKey)
	return k >= 0 && bytes.HasPrefix(afterSpace(data[k+len(ackDupKey):]), ackTrue)
}

func afterSpace(b []byte) []byte { return bytes.TrimLeft(b, " ") }

// leadingUint parses the decimal digits b starts with.
func leadingUint(b []byte) (uint64, bool) {
	var n uint64
	i := 0
	for ; i < len(b) && b[i] >= '0' && b[i] <= '9'; i++ {
		d := uint64(b[i] - '0')
		if n > (1<<64-1-d)/10 {
			return 0, false
		}
		n = n*10 + d
	}
	return n, i > 0
}
