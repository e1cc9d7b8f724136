package producer

import (
	"time"

	"github.com/nats-io/nats.go"

	spool "github.com/spoolq/spool/shared"
)

// Task is one unit of work to enqueue. Only Type is required: the zero
// value of every other field means its default (priority normal, a new id,
// the consumer's retries and timeout, no delay).
type Task struct {
	// Type names the handler: dot-separated tokens of [A-Za-z0-9_-]
	// ("email.send"). Required.
	Type string
	// Priority of the task; nil means spool.Normal, as on the wire
	// (the CLI's and the broker's default too). Set another with
	// new(spool.High).
	Priority *spool.Priority
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
	// Key is the flow-control key (a customer or tenant id, up to 256
	// bytes without CR or LF), sent as Spool-Key: per-key concurrency and
	// rate limits count the task under it. Empty: no key.
	Key string
	// ResultPolicy says whether the worker keeps the task's output, sent
	// as Spool-Result: spool.DiscardResult stores no result document when
	// the task completes (Result and Wait then answer ErrResultDiscarded;
	// its events, failures and dead letter are kept), spool.KeepResult
	// keeps it even where the worker discards the type's results. Empty:
	// the worker's rule for the type, which keeps results unless told
	// otherwise.
	ResultPolicy spool.ResultPolicy
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

// NewTask returns a task of type typ with payload, at spool.Normal
// priority (the zero Priority).
func NewTask(typ string, payload []byte) Task {
	return Task{Type: typ, Payload: payload}
}

// PriorityOrDefault is the task's priority: Priority, or spool.Normal when
// it is nil.
func (t Task) PriorityOrDefault() spool.Priority {
	if t.Priority == nil {
		return spool.Normal
	}
	return *t.Priority
}

// prepared is a validated task ready to publish.
type prepared struct {
	id        string
	msg       *nats.Msg
	priority  spool.Priority // of the task (the target's, for a scheduled one)
	typ       string
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

// taskSubject returns spool.tasks.<priority>.<type>, validating the type.
// last, if not nil, remembers the previous answer; without it the client's
// own last answer (shared by the callers of EnqueueAsync) is looked at.
func (c *Client) taskSubject(p spool.Priority, typ string, last *lastSubject) (string, error) {
	if last != nil && last.subject != "" && last.priority == p && last.typ == typ {
		return last.subject, nil
	}
	if last == nil {
		if l := c.lastSubject.Load(); l != nil && l.priority == p && l.typ == typ {
			return l.subject, nil
		}
	}
	subject, err := c.names.TaskSubject(p, typ)
	if err != nil {
		return subject, err
	}
	if last != nil {
		*last = lastSubject{priority: p, typ: typ, subject: subject}
	} else {
		c.lastSubject.Store(&lastSubject{priority: p, typ: typ, subject: subject})
	}
	return subject, nil
}

// prepare validates t and builds its message. now is the enqueue time,
// limit the largest message (payload plus headers) the stream accepts;
// last (may be nil) remembers the previous task's subject.
func (c *Client) prepare(t Task, now time.Time, limit int, last *lastSubject) (prepared, error) {
	var p prepared
	meta := spool.Meta{
		ID:          t.ID,
		MaxRetries:  t.MaxRetries,
		Timeout:     t.Timeout,
		UniqueKey:   t.UniqueKey,
		UniqueTTL:   t.UniqueTTL,
		Key:         t.Key,
		Result:      t.ResultPolicy,
		TraceParent: t.TraceParent,
		TraceState:  t.TraceState,
	}
	fields := spool.TaskFields{Type: t.Type, Priority: t.PriorityOrDefault(), Meta: meta, Delay: t.Delay, ProcessAt: t.ProcessAt, Headers: t.Headers}
	if err := fields.Validate(); err != nil {
		return p, err
	}
	if meta.ID == "" {
		meta.ID = spool.NewID() // valid by construction
	}
	p.id, p.priority, p.typ = meta.ID, t.PriorityOrDefault(), t.Type
	subject, err := c.taskSubject(p.priority, p.typ, last)
	if err != nil {
		return p, invalid("type", err)
	}
	switch {
	case t.Delay > 0:
		p.processAt = now.Add(t.Delay)
	case !t.ProcessAt.IsZero():
		p.processAt = t.ProcessAt
	}
	p.scheduled = p.processAt.After(now)

	var h nats.Header
	common := !p.scheduled && len(t.Headers) == 0 && meta == (spool.Meta{ID: p.id})
	if common {
		// The common task: its id (validated above) is all there is.
		h = nats.Header{spool.HeaderMsgID: {p.id}}
	} else {
		h = make(nats.Header, len(t.Headers)+2)
		for k, v := range t.Headers {
			h.Set(k, v)
		}
		if err := meta.Encode(h); err != nil {
			return p, err
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
		// Nats-Msg-Id from the message the schedule fires. (The common
		// task's header never had it.)
		if !common {
			delete(h, spool.HeaderTaskID)
		}
	}
	if err := spool.ValidateMsgSize(msg, limit); err != nil {
		return p, err
	}
	p.msg = msg
	p.uniqueKey, p.uniqueTTL = t.UniqueKey, t.UniqueTTL
	return p, nil
}
