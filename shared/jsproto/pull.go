package jsproto

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// NextSubject is the subject pull requests of a consumer are sent to.
func NextSubject(stream, consumer string) string {
	return "$JS.API.CONSUMER.MSG.NEXT." + stream + "." + consumer
}

// PullRequest is a request for messages of a pull consumer, published to
// NextSubject with a reply subject of one's own: the messages come there
// (each with its own subject and its ack subject as reply), and so does
// the status that ends the request early (see CheckStatus).
type PullRequest struct {
	// Batch is how many messages to deliver at most.
	Batch int
	// Expires ends the request after this long when it is not
	// fulfilled (status 408); 0: when the consumer's InactiveThreshold
	// or the server's limit ends it.
	Expires time.Duration
	// NoWait ends the request at once when no message is there (status
	// 404) instead of waiting for one.
	NoWait bool
	// Heartbeat asks for an idle heartbeat (status 100) this often while
	// the request waits; 0: none. It must be shorter than Expires.
	Heartbeat time.Duration
}

// AppendJSON appends the request's JSON body to b.
func (r PullRequest) AppendJSON(b []byte) []byte {
	b = append(b, `{"batch":`...)
	b = strconv.AppendInt(b, int64(r.Batch), 10)
	if r.Expires > 0 {
		b = append(b, `,"expires":`...)
		b = strconv.AppendInt(b, r.Expires.Nanoseconds(), 10)
	}
	if r.NoWait {
		b = append(b, `,"no_wait":true`...)
	}
	if r.Heartbeat > 0 {
		b = append(b, `,"idle_heartbeat":`...)
		b = strconv.AppendInt(b, r.Heartbeat.Nanoseconds(), 10)
	}
	return append(b, '}')
}

// End is what a status means for the pull request it answers.
type End uint8

const (
	// Continue: the request goes on (100: an idle heartbeat or a flow
	// control message).
	Continue End = iota
	// Done: the request ended normally and delivered all it will (404: no
	// messages for a no-wait request; 408: the request expired; 409
	// "Message Size Exceeds MaxBytes": the next message would not fit;
	// 409 "Batch Completed").
	Done
	// Failed: the request ended without its messages, for a reason that
	// may pass; pull again later (409 "Leadership Change", 409 "Exceeded
	// MaxRequestBatch/MaxWaiting/MaxRequestExpires/MaxRequestMaxBytes", 409
	// "Server Shutdown", 423 pin id mismatch, 503 no responders: the stream
	// or its leader is not there, and any status not known).
	Failed
	// Terminal: pulling this consumer cannot succeed as it stands (409
	// "Consumer Deleted", 400 bad request): nats.go's pull consumer stops
	// on these.
	Terminal
)

func (e End) String() string {
	switch e {
	case Continue:
		return "continue"
	case Done:
		return "done"
	case Failed:
		return "failed"
	case Terminal:
		return "terminal"
	}
	return "end(" + strconv.Itoa(int(e)) + ")"
}

// ErrPullLimit is the error of a 409 refusing a request past one of the
// consumer's limits (MaxRequestBatch, MaxWaiting, MaxRequestExpires,
// MaxRequestMaxBytes); the status's description says which.
var ErrPullLimit = errors.New("pull request exceeds a consumer limit")

// Status is a status message a pull request was answered with.
type Status struct {
	Code        string // the Status header: "404", "409", ...
	Description string // the Description header
	End         End
	// Err is nats.go's error for the status (what jetstream's Fetch and
	// Consume report): jetstream.ErrNoMessages, nats.ErrTimeout,
	// jetstream.ErrConsumerDeleted, jetstream.ErrConsumerLeadershipChanged,
	// jetstream.ErrMaxBytesExceeded, jetstream.ErrBatchCompleted,
	// jetstream.ErrServerShutdown, jetstream.ErrBadRequest,
	// jetstream.ErrPinIDMismatch, nats.ErrNoResponders, or ErrPullLimit
	// with the description; nil for Continue.
	Err error
}

func (s Status) String() string { return s.Code + " " + s.Description }

// CheckStatus reads a message received on a pull request's reply subject:
// false for a delivered message (it has data, or no Status header), else
// the status and what it means, as nats.go's checkMsg reads it.
func CheckStatus(m *nats.Msg) (Status, bool) {
	if len(m.Data) > 0 || len(m.Header) == 0 {
		return Status{}, false
	}
	code := m.Header.Get("Status")
	if code == "" {
		return Status{}, false
	}
	s := Status{Code: code, Description: m.Header.Get("Description")}
	s.End, s.Err = classify(code, s.Description)
	return s, true
}

func classify(code, desc string) (End, error) {
	switch code {
	case "100":
		return Continue, nil
	case "404":
		return Done, jetstream.ErrNoMessages
	case "408":
		return Done, nats.ErrTimeout
	case "400":
		return Terminal, jetstream.ErrBadRequest
	case "503":
		return Failed, nats.ErrNoResponders
	case "423":
		return Failed, jetstream.ErrPinIDMismatch
	case "409":
		d := strings.ToLower(desc)
		switch {
		case strings.Contains(d, "message size exceeds maxbytes"):
			return Done, jetstream.ErrMaxBytesExceeded
		case strings.Contains(d, "batch completed"):
			return Done, jetstream.ErrBatchCompleted
		case strings.Contains(d, "consumer deleted"):
			return Terminal, jetstream.ErrConsumerDeleted
		case strings.Contains(d, "leadership change"):
			return Failed, jetstream.ErrConsumerLeadershipChanged
		case strings.Contains(d, "server shutdown"):
			return Failed, jetstream.ErrServerShutdown
		case strings.HasPrefix(d, "exceeded max"):
			return Failed, fmt.Errorf("%w: %s", ErrPullLimit, desc)
		}
	}
	return Failed, fmt.Errorf("nats: status %s %s", code, desc)
}
