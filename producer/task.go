package producer

import (
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	spool "github.com/spoolq/spool/shared"
)

// Task is one unit of work to enqueue. Only Type is required; build one with
// NewTask to get the Normal priority (the zero Priority is spool.Critical).
type Task struct {
	// Type names the handler: dot-separated tokens of [A-Za-z0-9_-]
	// ("email.send"). Required.
	Type string
	// Priority of the task. The zero value is spool.Critical; NewTask sets
	// spool.Normal.
	Priority spool.Priority
	// Payload is the message body, passed to the handler byte for byte.
	Payload []byte
	// ID is the task id; empty means a new time-ordered id (spool.NewID).
	// Enqueueing the same id again within the stream's duplicate window
	// stores nothing and reports Duplicate.
	ID string
	// MaxRetries is the number of retries after the first attempt; nil
	// leaves the consumer's default (spool.DefaultMaxRetries). new(0)
	// means no retries.
	MaxRetries *int
	// Timeout is the per-attempt handler deadline; zero leaves the
	// consumer's default.
	Timeout time.Duration
	// UniqueKey, if set, holds the key for UniqueTTL (at least 1s): while
	// it lives another task with the same key is refused.
	UniqueKey string
	UniqueTTL time.Duration
	// ProcessAt delays the task until this time; a time not in the future
	// runs now. Set at most one of ProcessAt and Delay.
	ProcessAt time.Time
	// Delay delays the task by this duration from the enqueue call.
	Delay time.Duration
	// Headers are extra headers carried with the task. Names are HTTP-style
	// tokens; names starting with Nats- or Spool- and the trace headers are
	// reserved. Values must not contain CR or LF.
	Headers map[string]string
	// TraceParent and TraceState are the W3C trace context.
	TraceParent string
	TraceState  string
}

// NewTask returns a task of type typ at spool.Normal priority.
func NewTask(typ string, payload []byte) Task {
	return Task{Type: typ, Priority: spool.Normal, Payload: payload}
}

// maxTraceLen bounds traceparent and tracestate values.
const maxTraceLen = 512

// prepared is a validated task ready to publish.
type prepared struct {
	id        string
	msg       *nats.Msg
	uniqueKey string
	uniqueTTL time.Duration
	scheduled bool
	processAt time.Time
}

// lastSubject remembers the task subject of a batch's previous task, whose
// priority and type the next task most often shares.
type lastSubject struct {
	priority spool.Priority
	typ      string
	subject  string
}

// taskSubject returns spool.tasks.<priority>.<type>, validating the type;
// last, if not nil, remembers the previous answer.
func (c *Client) taskSubject(p spool.Priority, typ string, last *lastSubject) (string, error) {
	if last != nil && last.subject != "" && last.priority == p && last.typ == typ {
		return last.subject, nil
	}
	subject, err := c.names.TaskSubject(p, typ)
	if err == nil && last != nil {
		*last = lastSubject{priority: p, typ: typ, subject: subject}
	}
	return subject, err
}

// prepare validates t and builds its message. now is the enqueue time,
// limit the largest message (payload plus headers) the stream accepts;
// last (may be nil) remembers the previous task's subject.
func (c *Client) prepare(t Task, now time.Time, limit int, last *lastSubject) (prepared, error) {
	var p prepared
	if !t.Priority.Valid() {
		return p, invalid("priority", fmt.Errorf("%w: %d (want spool.Critical to spool.Idle)", ErrInvalidPriority, int(t.Priority)))
	}
	subject, err := c.taskSubject(t.Priority, t.Type, last) // validates the type
	if err != nil {
		return p, invalid("type", err)
	}
	p.id = t.ID
	if p.id == "" {
		p.id = spool.NewID()
	} else if err := spool.ValidateID(p.id); err != nil {
		return p, invalid("id", err)
	}
	if t.MaxRetries != nil && (*t.MaxRetries < 0 || *t.MaxRetries > spool.MaxMaxRetries) {
		return p, invalid("max_retries", fmt.Errorf("%w: %w: %d must be 0 to %d",
			ErrInvalidMaxRetries, ErrInvalidHeader, *t.MaxRetries, spool.MaxMaxRetries))
	}
	if t.Timeout < 0 || t.Timeout > spool.MaxTimeout {
		return p, invalid("timeout", fmt.Errorf("%w: %w: %s must be positive and at most %s",
			ErrInvalidTimeout, ErrInvalidHeader, t.Timeout, spool.MaxTimeout))
	}
	if err := validateUnique(t); err != nil {
		return p, err
	}
	if err := validateTrace(t); err != nil {
		return p, err
	}
	switch {
	case t.Delay < 0:
		return p, invalid("delay", fmt.Errorf("%w: %s is negative", ErrInvalidDelay, t.Delay))
	case t.Delay > 0 && !t.ProcessAt.IsZero():
		return p, invalid("delay", fmt.Errorf("%w: set a delay or a process-at time, not both", ErrInvalidDelay))
	case t.Delay > 0:
		p.processAt = now.Add(t.Delay)
	case !t.ProcessAt.IsZero():
		p.processAt = t.ProcessAt
	}
	p.scheduled = p.processAt.After(now)

	meta := spool.Meta{
		ID:          p.id,
		MaxRetries:  t.MaxRetries,
		Timeout:     t.Timeout,
		UniqueKey:   t.UniqueKey,
		UniqueTTL:   t.UniqueTTL,
		TraceParent: t.TraceParent,
		TraceState:  t.TraceState,
	}
	var h nats.Header
	if !p.scheduled && len(t.Headers) == 0 && meta == (spool.Meta{ID: p.id}) {
		// The common task: its id (validated above) is all there is.
		h = nats.Header{spool.HeaderMsgID: {p.id}}
	} else {
		h = make(nats.Header, len(t.Headers)+2)
		for k, v := range t.Headers {
			if err := validateExtraHeader(k, v); err != nil {
				return p, invalid("headers", err)
			}
			h.Set(k, v)
		}
		if err := meta.Encode(h); err != nil {
			return p, invalid("headers", err)
		}
	}
	msg := &nats.Msg{Subject: subject, Header: h, Data: t.Payload}
	if p.scheduled {
		sched, err := c.names.SchedSubject(p.id)
		if err != nil {
			return p, invalid("id", err)
		}
		msg.Subject = sched
		h.Set(spool.HeaderSchedule, spool.FormatScheduleAt(p.processAt))
		h.Set(spool.HeaderScheduleTarget, subject)
	} else {
		p.processAt = time.Time{}
		// An immediate task's id travels in Nats-Msg-Id alone: every
		// reader falls back to it (the wire contract), and a header less
		// saves the client and the server a tenth of their work per
		// publish. A scheduled task keeps Spool-Task-Id: the server strips
		// Nats-Msg-Id from the message the schedule fires.
		delete(h, spool.HeaderTaskID)
	}
	if size := msgSize(msg); size > limit {
		return p, invalid("payload", fmt.Errorf("%w: %d bytes of payload and %d of headers exceed the limit of %d bytes",
			ErrPayloadTooLarge, len(msg.Data), size-len(msg.Data), limit))
	}
	p.msg = msg
	p.uniqueKey, p.uniqueTTL = t.UniqueKey, t.UniqueTTL
	return p, nil
}

func validateUnique(t Task) error {
	switch {
	case len(t.UniqueKey) > spool.MaxUniqueKeyLen:
		return invalid("unique_key", fmt.Errorf("%w: %w: %d bytes, at most %d",
			ErrInvalidUnique, ErrInvalidHeader, len(t.UniqueKey), spool.MaxUniqueKeyLen))
	case strings.ContainsAny(t.UniqueKey, "\r\n"):
		return invalid("unique_key", fmt.Errorf("%w: %w: contains CR or LF", ErrInvalidUnique, ErrInvalidHeader))
	case t.UniqueTTL < 0:
		return invalid("unique_ttl", fmt.Errorf("%w: %w: %s is negative", ErrInvalidUnique, ErrInvalidHeader, t.UniqueTTL))
	case t.UniqueTTL > 0 && t.UniqueKey == "":
		return invalid("unique_key", fmt.Errorf("%w: %w: a unique TTL needs a unique key", ErrInvalidUnique, ErrInvalidHeader))
	case t.UniqueKey != "" && t.UniqueTTL < time.Second:
		return invalid("unique_ttl", fmt.Errorf("%w: %w: a unique key needs a TTL of at least 1s, got %s",
			ErrInvalidUnique, ErrInvalidHeader, t.UniqueTTL))
	}
	return nil
}

func validateTrace(t Task) error {
	for _, f := range []struct{ name, v string }{{"traceparent", t.TraceParent}, {"tracestate", t.TraceState}} {
		if len(f.v) > maxTraceLen {
			return invalid(f.name, fmt.Errorf("%w: %s is %d bytes, at most %d", ErrInvalidHeader, f.name, len(f.v), maxTraceLen))
		}
		if strings.ContainsAny(f.v, "\r\n") {
			return invalid(f.name, fmt.Errorf("%w: %s contains CR or LF", ErrInvalidHeader, f.name))
		}
	}
	return nil
}

// validateExtraHeader checks one caller-supplied header.
func validateExtraHeader(k, v string) error {
	if k == "" {
		return fmt.Errorf("%w: empty header name", ErrInvalidHeader)
	}
	for i := 0; i < len(k); i++ {
		if !isHeaderNameChar(k[i]) {
			return fmt.Errorf("%w: header name %q has %q (allowed: letters, digits and !#$%%&'*+-.^_`|~)", ErrInvalidHeader, k, k[i])
		}
	}
	lk := strings.ToLower(k)
	if strings.HasPrefix(lk, "nats-") || strings.HasPrefix(lk, "spool-") || lk == spool.HeaderTraceParent || lk == spool.HeaderTraceState {
		return fmt.Errorf("%w: header %q is reserved (Nats-*, Spool-*, traceparent and tracestate are set from task fields)", ErrInvalidHeader, k)
	}
	if strings.ContainsAny(v, "\r\n") {
		return fmt.Errorf("%w: value of header %q contains CR or LF", ErrInvalidHeader, k)
	}
	return nil
}

func isHeaderNameChar(c byte) bool {
	if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' {
		return true
	}
	return strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}

// msgSize is the size JetStream checks against the stream's max message
// size: the encoded headers plus the payload.
func msgSize(m *nats.Msg) int {
	n := len(m.Data)
	if len(m.Header) == 0 {
		return n
	}
	n += len("NATS/1.0\r\n") + len("\r\n")
	for k, vs := range m.Header {
		for _, v := range vs {
			n += len(k) + len(": ") + len(v) + len("\r\n")
		}
	}
	return n
}
