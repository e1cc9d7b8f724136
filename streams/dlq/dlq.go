package dlq

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	spool "github.com/spoolq/spool/shared"
)

// Errors.
var (
	// ErrNotFound: no dead letter has that sequence.
	ErrNotFound = errors.New("dead letter not found")
	// ErrInvalidFilter: a filter field is malformed.
	ErrInvalidFilter = errors.New("invalid dead-letter filter")
	// ErrNoFilter: Purge was given neither a filter nor all.
	ErrNoFilter = errors.New("purge needs a filter (priority, type, reason, since, until) or all")
	// ErrNotReplayable: the dead letter has no task subject to go back to.
	ErrNotReplayable = errors.New("dead letter cannot be replayed")
)

// Limits of a page.
const (
	// DefaultLimit is the page size when Filter.Limit is 0.
	DefaultLimit = 100
	// MaxLimit is the largest page.
	MaxLimit = 1000
)

// fetchWait bounds one fetch of the listing consumer. The consumer only
// asks for messages the server reported pending, so it is reached only when
// dead letters vanish (purged) while listed.
const fetchWait = 2 * time.Second

// DLQ manages the dead-letter stream of one prefix. It is safe for
// concurrent use and never closes the connection behind js.
type DLQ struct {
	js    jetstream.JetStream
	names spool.Names
	now   func() time.Time
}

// New returns a DLQ on js for names.
func New(js jetstream.JetStream, names spool.Names) *DLQ {
	return &DLQ{js: js, names: names, now: time.Now}
}

// Letter is one dead letter.
type Letter struct {
	// Seq is the dead letter's sequence in the DLQ stream.
	Seq uint64 `json:"seq"`
	// Subject is spool.dlq.<priority>.<type>.
	Subject string `json:"subject"`
	// Time is when the dead letter was stored.
	Time     time.Time      `json:"time"`
	TaskID   string         `json:"task_id"`
	Priority spool.Priority `json:"priority"`
	Type     string         `json:"type"`
	Reason   spool.Reason   `json:"reason"`
	Error    string         `json:"error,omitempty"`
	Attempts int            `json:"attempts"`
	// FailedAt is Spool-Failed-At; nil when missing or malformed.
	FailedAt *time.Time `json:"failed_at,omitempty"`
	// OriginalSubject is where the task died, and where a replay sends it.
	OriginalSubject string `json:"original_subject"`
	// OriginalSeq is the task's sequence in the task stream.
	OriginalSeq uint64      `json:"original_seq,omitempty"`
	Header      nats.Header `json:"headers,omitempty"`
	// Payload is the task payload encoded as a result document's result
	// (spool.ResultValue): JSON stays JSON, other UTF-8 is a string with
	// PayloadEncoding "text", anything else base64 with PayloadEncoding
	// "base64". Data holds the bytes.
	Payload         json.RawMessage `json:"payload,omitempty"`
	PayloadEncoding string          `json:"payload_encoding,omitempty"`
	Data            []byte          `json:"-"`
	// Size is the payload size in bytes.
	Size int `json:"size"`
}

func (d *DLQ) letter(seq uint64, subject string, stored time.Time, h nats.Header, data []byte) Letter {
	l := Letter{
		Seq:             seq,
		Subject:         subject,
		Time:            stored,
		Reason:          spool.Reason(h.Get(spool.HeaderReason)),
		Error:           h.Get(spool.HeaderError),
		OriginalSubject: h.Get(spool.HeaderOriginalSubject),
		Header:          h,
		Data:            data,
		Size:            len(data),
	}
	l.Payload, l.PayloadEncoding = spool.ResultValue(data)
	if p, typ, err := d.names.ParseDLQSubject(subject); err == nil {
		l.Priority, l.Type = p, typ
	}
	l.Attempts, _ = strconv.Atoi(h.Get(spool.HeaderAttempts))
	l.OriginalSeq, _ = strconv.ParseUint(h.Get(spool.HeaderOriginalSeq), 10, 64)
	if t, err := time.Parse(time.RFC3339Nano, h.Get(spool.HeaderFailedAt)); err == nil {
		l.FailedAt = &t
	}
	l.TaskID = d.taskID(h, l.OriginalSeq)
	return l
}

// taskID is the id the worker gave the task: Spool-Task-Id (Header sets it
// when the task had none), else, when that is invalid or missing, the id
// the task's sequence gives it in the task stream that the dead letter's
// Nats-Msg-Id (dlq-<stream>-<seq>) names.
func (d *DLQ) taskID(h nats.Header, origSeq uint64) string {
	if id := h.Get(spool.HeaderTaskID); id != "" && spool.ValidateID(id) == nil {
		return id
	}
	if origSeq == 0 {
		return ""
	}
	stream := strings.TrimPrefix(h.Get(spool.HeaderMsgID), "dlq-")
	stream = strings.TrimSuffix(stream, "-"+strconv.FormatUint(origSeq, 10))
	return d.names.TaskID(nil, stream, origSeq)
}

// Filter selects dead letters. Zero fields select everything.
type Filter struct {
	// Priority, when set, keeps dead letters of that priority.
	Priority *spool.Priority
	// Type keeps dead letters of exactly this task type.
	Type string
	// Reason keeps dead letters with this Spool-Reason.
	Reason spool.Reason
	// Since and Until keep dead letters stored in [Since, Until].
	Since, Until time.Time
	// After resumes a listing after this DLQ sequence (Page.Next).
	After uint64
	// Limit is the most dead letters returned: DefaultLimit when 0, at most
	// MaxLimit.
	Limit int
}

// Selects reports whether f narrows the dead letters (After and Limit
// page, they do not select).
func (f Filter) Selects() bool {
	return f.Priority != nil || f.Type != "" || f.Reason != "" || !f.Since.IsZero() || !f.Until.IsZero()
}

// Validate checks the fields.
func (f Filter) Validate() error {
	if f.Priority != nil && !f.Priority.Valid() {
		return fmt.Errorf("%w: priority %d", ErrInvalidFilter, int(*f.Priority))
	}
	if f.Type != "" {
		if err := spool.ValidateType(f.Type); err != nil {
			return fmt.Errorf("%w: type: %w", ErrInvalidFilter, err)
		}
	}
	if f.Reason != "" && !validReason(f.Reason) {
		return fmt.Errorf("%w: reason %q (want one of %s)", ErrInvalidFilter, f.Reason, strings.Join(reasonNames(), ", "))
	}
	if !f.Since.IsZero() && !f.Until.IsZero() && f.Until.Before(f.Since) {
		return fmt.Errorf("%w: until %s is before since %s", ErrInvalidFilter, f.Until.Format(time.RFC3339), f.Since.Format(time.RFC3339))
	}
	if f.Limit < 0 || f.Limit > MaxLimit {
		return fmt.Errorf("%w: limit %d must be 0 to %d", ErrInvalidFilter, f.Limit, MaxLimit)
	}
	return nil
}

// Reasons lists the dead-letter reasons.
var reasons = []spool.Reason{
	spool.ReasonError, spool.ReasonPermanent, spool.ReasonTimeout, spool.ReasonPanic,
	spool.ReasonMaxDeliver, spool.ReasonBadInput, spool.ReasonNoHandler, spool.ReasonUnserved,
}

func validReason(r spool.Reason) bool {
	for _, v := range reasons {
		if v == r {
			return true
		}
	}
	return false
}

func reasonNames() []string {
	s := make([]string, len(reasons))
	for i, r := range reasons {
		s[i] = string(r)
	}
	return s
}

// subject is the narrowest DLQ subject filter for f.
func (f Filter) subject(names spool.Names) string {
	pri, typ := "*", ">"
	if f.Priority != nil {
		pri = f.Priority.String()
	}
	if f.Type != "" {
		typ = f.Type
	}
	if pri == "*" && typ == ">" {
		return names.DLQFilter()
	}
	return names.Prefix() + ".dlq." + pri + "." + typ
}

// match applies the filters the subject cannot express.
func (f Filter) match(l *Letter) bool {
	if f.Reason != "" && l.Reason != f.Reason {
		return false
	}
	if !f.Since.IsZero() && l.Time.Before(f.Since) {
		return false
	}
	return true
}

// Page is one page of a listing.
type Page struct {
	Letters []Letter `json:"dead_letters"`
	// Next, when not zero, is the Filter.After that lists the next page.
	Next uint64 `json:"next,omitempty"`
}

// List returns the first page of dead letters matching f, oldest first.
func (d *DLQ) List(ctx context.Context, f Filter) (Page, error) {
	var page Page
	if err := f.Validate(); err != nil {
		return page, err
	}
	limit := f.Limit
	if limit == 0 {
		limit = DefaultLimit
	}
	err := d.scan(ctx, f, func(l Letter) bool {
		if len(page.Letters) == limit {
			page.Next = page.Letters[limit-1].Seq
			return false
		}
		page.Letters = append(page.Letters, l)
		return true
	})
	return page, err
}

// scan calls fn with every dead letter matching f, in order, until fn
// returns false or none is left. f.Limit is ignored.
func (d *DLQ) scan(ctx context.Context, f Filter, fn func(Letter) bool) error {
	stream := d.names.DLQStream()
	cfg := jetstream.ConsumerConfig{
		Description:       "spool dlq listing",
		FilterSubject:     f.subject(d.names),
		AckPolicy:         jetstream.AckNonePolicy,
		InactiveThreshold: time.Minute,
		MemoryStorage:     true,
		Replicas:          1,
		DeliverPolicy:     jetstream.DeliverAllPolicy,
	}
	switch {
	case f.After > 0:
		cfg.DeliverPolicy = jetstream.DeliverByStartSequencePolicy
		cfg.OptStartSeq = f.After + 1
	case !f.Since.IsZero():
		cfg.DeliverPolicy = jetstream.DeliverByStartTimePolicy
		since := f.Since
		cfg.OptStartTime = &since
	}
	cons, err := d.js.CreateConsumer(ctx, stream, cfg)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return &spool.NotProvisionedError{Kind: "stream", Name: stream, Err: err}
	}
	if err != nil {
		return fmt.Errorf("listing %s: creating a consumer: %w", stream, err)
	}
	defer func() {
		// A listing consumer left behind expires after InactiveThreshold.
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = d.js.DeleteConsumer(dctx, stream, cons.CachedInfo().Name)
	}()
	left := cons.CachedInfo().NumPending
	for left > 0 {
		batch := int(min(left, 500))
		msgs, err := cons.Fetch(batch, jetstream.FetchMaxWait(fetchWait))
		if err != nil {
			return fmt.Errorf("listing %s: %w", stream, err)
		}
		got := 0
		// done ends the listing, but only after the batch is drained: the
		// fetch's goroutine ends once its messages are in (they are all
		// pending), not left waiting for a reply that a closed connection
		// never brings.
		var done bool
		var doneErr error
		for m := range msgs.Messages() {
			got++
			if done {
				continue
			}
			md, err := m.Metadata()
			if err != nil {
				done, doneErr = true, fmt.Errorf("listing %s: %w", stream, err)
				continue
			}
			left = md.NumPending
			if !f.Until.IsZero() && md.Timestamp.After(f.Until) {
				done = true // stored in order: nothing later matches
				continue
			}
			l := d.letter(md.Sequence.Stream, m.Subject(), md.Timestamp, m.Headers(), m.Data())
			if f.match(&l) && !fn(l) {
				done = true
			}
		}
		if done {
			return doneErr
		}
		if err := msgs.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) {
			return fmt.Errorf("listing %s: %w", stream, err)
		}
		if got == 0 {
			return nil // gone while we listed
		}
		if err := ctx.Err(); err != nil {
			return err
		}
	}
	return nil
}

// Get returns the dead letter with sequence seq.
func (d *DLQ) Get(ctx context.Context, seq uint64) (Letter, error) {
	s, err := d.stream(ctx)
	if err != nil {
		return Letter{}, err
	}
	m, err := s.GetMsg(ctx, seq)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return Letter{}, fmt.Errorf("%w: sequence %d", ErrNotFound, seq)
	}
	if err != nil {
		return Letter{}, fmt.Errorf("reading dead letter %d: %w", seq, err)
	}
	return d.letter(m.Sequence, m.Subject, m.Time, m.Header, m.Data), nil
}

func (d *DLQ) stream(ctx context.Context) (jetstream.Stream, error) {
	s, err := d.js.Stream(ctx, d.names.DLQStream())
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, &spool.NotProvisionedError{Kind: "stream", Name: d.names.DLQStream(), Err: err}
	}
	if err != nil {
		return nil, fmt.Errorf("opening stream %q: %w", d.names.DLQStream(), err)
	}
	return s, nil
}

// Size is the number of dead letters.
func (d *DLQ) Size(ctx context.Context) (uint64, error) {
	s, err := d.stream(ctx)
	if err != nil {
		return 0, err
	}
	return s.CachedInfo().State.Msgs, nil
}

// Purge deletes the dead letters matching f, or every one when all is set,
// and returns how many it deleted. Without all, f must select something
// (Filter.Selects), so that an empty filter never empties the stream.
// After and Limit are ignored.
func (d *DLQ) Purge(ctx context.Context, f Filter, all bool) (uint64, error) {
	if err := f.Validate(); err != nil {
		return 0, err
	}
	if !all && !f.Selects() {
		return 0, ErrNoFilter
	}
	s, err := d.stream(ctx)
	if err != nil {
		return 0, err
	}
	before := s.CachedInfo().State.Msgs
	if all || (f.Reason == "" && f.Since.IsZero() && f.Until.IsZero()) {
		// A subject purge is one call on the server.
		var opts []jetstream.StreamPurgeOpt
		if !all {
			opts = append(opts, jetstream.WithPurgeSubject(f.subject(d.names)))
		}
		if err := s.Purge(ctx, opts...); err != nil {
			return 0, fmt.Errorf("purging %s: %w", d.names.DLQStream(), err)
		}
		info, err := s.Info(ctx)
		if err != nil {
			return 0, fmt.Errorf("reading %s: %w", d.names.DLQStream(), err)
		}
		return before - min(before, info.State.Msgs), nil
	}
	f.After = 0
	var seqs []uint64
	if err := d.scan(ctx, f, func(l Letter) bool { seqs = append(seqs, l.Seq); return true }); err != nil {
		return 0, err
	}
	var n uint64
	for _, seq := range seqs {
		err := s.DeleteMsg(ctx, seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			return n, fmt.Errorf("deleting dead letter %d: %w", seq, err)
		}
		n++
	}
	return n, nil
}
