package spool

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
)

// Header names of the wire contract. Every one is optional for a raw
// publisher.
const (
	// HeaderMsgID is JetStream's publish-side dedup id (Nats-Msg-Id).
	HeaderMsgID = nats.MsgIdHdr
	// HeaderTaskID carries the task id. The server strips Nats-Msg-Id from
	// scheduled messages, so the id needs a header of its own.
	HeaderTaskID = "Spool-Task-Id"
	// HeaderMaxRetries is the number of retries after the first attempt.
	HeaderMaxRetries = "Spool-Max-Retries"
	// HeaderTimeout is the per-attempt handler deadline, a Go duration.
	HeaderTimeout = "Spool-Timeout"
	// HeaderUniqueKey makes the task unique while the key lives.
	HeaderUniqueKey = "Spool-Unique-Key"
	// HeaderUniqueTTL is how long the unique key lives, a Go duration.
	HeaderUniqueTTL = "Spool-Unique-TTL"
	// HeaderKey is the task's flow-control key (a customer or tenant id):
	// per-key concurrency and rate limits count tasks by it.
	HeaderKey = "Spool-Key"
	// HeaderResult says whether the worker keeps the task's output in the
	// results bucket: "keep" or "discard" (ResultPolicy). Absent: the
	// worker's rule for the type, which keeps it unless the worker was
	// told to discard the type's results. On the results bucket the same
	// name, with the value "discarded", marks the delete marker a task
	// whose result is discarded leaves when it completes
	// (IsDiscardedMarker).
	HeaderResult = "Spool-Result"
	// HeaderPriorAttempts is set by a worker that hands a task back for
	// flow control (a limit was full): the attempts the task used before
	// this message, so the hand-back costs none of its retries.
	HeaderPriorAttempts = "Spool-Prior-Attempts"
	// HeaderDeferrals counts how many times flow control handed the task
	// back; it lengthens the next hand-back's delay.
	HeaderDeferrals = "Spool-Deferrals"
	// HeaderEnqueuedAt is set on every copy of a task that Spool publishes
	// again (a flow-control hand-back, a park for a type pause, a waiting
	// room or a key's turn, and the release from either): the time the
	// task was first enqueued (RFC 3339 with nanoseconds, UTC), the
	// stream timestamp of its first message. The worker reports it as the
	// task's enqueued_at instead of the copy's own timestamp. A publisher
	// does not set it.
	HeaderEnqueuedAt = "Spool-Enqueued-At"
	// HeaderOrderSeq is the turn of a task of an ordered type (a rule's
	// "ordered"): the stream sequence its copy had on the key's held
	// subject, the key's enqueue order. Set when the task is released to
	// its task subject; see shared/limits.
	HeaderOrderSeq = "Spool-Order-Seq"
	// HeaderHeldTarget is the task subject a task parked on a held subject
	// goes back to when its turn comes.
	HeaderHeldTarget = "Spool-Held-Target"
	// HeaderSlot hands concurrency slots to a task that waited in a
	// limit's waiting room: one value "<lease key> <revision>" per slot,
	// the revision its holder wrote last. The worker that receives the
	// task takes each slot over with a compare-and-set at that revision
	// instead of taking a new one; see shared/limits (Room).
	HeaderSlot = "Spool-Slot"
	// HeaderTraceParent and HeaderTraceState carry W3C trace context.
	HeaderTraceParent = "traceparent"
	HeaderTraceState  = "tracestate"

	// HeaderSchedule and HeaderScheduleTarget are JetStream's scheduling
	// headers, used for delayed tasks on spool.sched.<id>.
	HeaderSchedule       = "Nats-Schedule"
	HeaderScheduleTarget = "Nats-Schedule-Target"
	// HeaderScheduleTimeZone is the IANA time zone of a cron schedule.
	HeaderScheduleTimeZone = "Nats-Schedule-Time-Zone"
	// HeaderScheduleName names the periodic schedule (spool.cron.<name>)
	// a task was fired by; it travels with every task the schedule fires.
	HeaderScheduleName = "Spool-Schedule"
	// HeaderScheduler and HeaderScheduleNext are set by the server on a
	// message a schedule fired: the schedule's subject, and the next time
	// it fires, or ScheduleNextPurge for a one-shot (@at) schedule, which
	// the server removes as it fires. A client cannot publish another
	// value of HeaderScheduleNext, so a time there proves a repeating
	// schedule fired the message.
	HeaderScheduler    = "Nats-Scheduler"
	HeaderScheduleNext = "Nats-Schedule-Next"
	ScheduleNextPurge  = "purge"

	// Headers added to dead letters.
	HeaderError           = "Spool-Error"
	HeaderReason          = "Spool-Reason"
	HeaderAttempts        = "Spool-Attempts"
	HeaderFailedAt        = "Spool-Failed-At"
	HeaderOriginalSubject = "Spool-Original-Subject"
	HeaderOriginalSeq     = "Spool-Original-Seq"

	// HeaderReplays and HeaderReplayedAt are set on a task replayed from
	// the dead-letter stream: how many times it was replayed, and when
	// last (RFC 3339 with nanoseconds, UTC). Result documents carry them as
	// replays and replayed_at.
	HeaderReplays    = "Spool-Replays"
	HeaderReplayedAt = "Spool-Replayed-At"
)

// Limits on header values.
const (
	// DefaultMaxRetries applies when a task names no Spool-Max-Retries.
	DefaultMaxRetries = 3
	// MaxMaxRetries is the largest Spool-Max-Retries accepted.
	MaxMaxRetries = 1000
	// MaxTimeout is the longest Spool-Timeout accepted.
	MaxTimeout = 24 * time.Hour
	// MaxUniqueKeyLen is the longest Spool-Unique-Key accepted.
	MaxUniqueKeyLen = 256
	// MaxKeyLen is the longest Spool-Key accepted.
	MaxKeyLen = 256
)

// Meta is the task metadata carried in headers. Zero fields mean "not set".
type Meta struct {
	// ID is the task id (Spool-Task-Id, else Nats-Msg-Id, else empty).
	ID string
	// MaxRetries is nil when the header is absent.
	MaxRetries *int
	// Timeout is zero when the header is absent.
	Timeout time.Duration
	// UniqueKey and UniqueTTL are empty/zero when absent.
	UniqueKey string
	UniqueTTL time.Duration
	// Key is the flow-control key (Spool-Key), empty when absent.
	Key string
	// Result is the task's result policy (Spool-Result), empty when
	// absent: the worker's rule for the type decides.
	Result ResultPolicy
	// PriorAttempts and Deferrals are set by workers on a task handed back
	// for flow control (Spool-Prior-Attempts, Spool-Deferrals); 0 when
	// absent. A publisher does not set them.
	PriorAttempts int
	Deferrals     int
	// TraceParent and TraceState are the W3C trace context, if any.
	TraceParent string
	TraceState  string
}

// Validate checks every set field against the contract, with the rules
// and codes of TaskFields.Validate, and returns a *FieldError for the first
// one at fault. The trace context is not checked: it is passed on as given.
func (m Meta) Validate() error {
	if m.ID != "" {
		if err := ValidateID(m.ID); err != nil {
			return NewFieldError(fieldID, err)
		}
	}
	if err := validateMaxRetries(m.MaxRetries); err != nil {
		return err
	}
	if err := validateTimeout(m.Timeout); err != nil {
		return err
	}
	if err := validateKey(m.Key); err != nil {
		return err
	}
	if err := validateResultPolicy(m.Result); err != nil {
		return err
	}
	if err := validateFlowCounts(m.PriorAttempts, m.Deferrals); err != nil {
		return err
	}
	return validateUnique(m.UniqueKey, m.UniqueTTL)
}

// Encode validates m and writes its set fields into h. ID goes into both
// Spool-Task-Id and Nats-Msg-Id, so a retried publish is deduplicated.
func (m Meta) Encode(h nats.Header) error {
	if err := m.Validate(); err != nil {
		return err
	}
	set := func(k, v string) {
		if v != "" {
			h.Set(k, v)
		}
	}
	set(HeaderTaskID, m.ID)
	set(HeaderMsgID, m.ID)
	if m.MaxRetries != nil {
		h.Set(HeaderMaxRetries, strconv.Itoa(*m.MaxRetries))
	}
	if m.Timeout > 0 {
		h.Set(HeaderTimeout, m.Timeout.String())
	}
	set(HeaderUniqueKey, m.UniqueKey)
	if m.UniqueTTL > 0 {
		h.Set(HeaderUniqueTTL, m.UniqueTTL.String())
	}
	set(HeaderKey, m.Key)
	set(HeaderResult, string(m.Result))
	if m.PriorAttempts > 0 {
		h.Set(HeaderPriorAttempts, strconv.Itoa(m.PriorAttempts))
	}
	if m.Deferrals > 0 {
		h.Set(HeaderDeferrals, strconv.Itoa(m.Deferrals))
	}
	set(HeaderTraceParent, m.TraceParent)
	set(HeaderTraceState, m.TraceState)
	return nil
}

// DecodeMeta reads and validates the metadata headers of a task. Header
// names match in any case. The id falls back from Spool-Task-Id to
// Nats-Msg-Id; it is empty when neither is set, and the caller then uses the
// stream sequence. Errors are the *FieldError that TaskFields.Validate
// returns for the same value (a bad Spool-Timeout is an invalid_timeout of
// the timeout field); they wrap ErrInvalidHeader or ErrInvalidID.
func DecodeMeta(h nats.Header) (Meta, error) {
	var m Meta
	m.ID = headerValue(h, HeaderTaskID)
	if m.ID == "" {
		m.ID = headerValue(h, HeaderMsgID)
	}
	if v := headerValue(h, HeaderMaxRetries); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			return m, NewFieldError(fieldMaxRetries, fmt.Errorf("%w: %w: %s %q is not a whole number",
				ErrInvalidMaxRetries, ErrInvalidHeader, HeaderMaxRetries, v))
		}
		m.MaxRetries = &n
	}
	timeout := headerValue(h, HeaderTimeout)
	var err error
	if m.Timeout, err = ParseDuration(fieldTimeout, timeout); err != nil {
		return m, err
	}
	if m.Timeout == 0 && timeout != "" {
		return m, NewFieldError(fieldTimeout, fmt.Errorf("%w: %w: %s must be positive", ErrInvalidTimeout, ErrInvalidHeader, HeaderTimeout))
	}
	m.UniqueKey = headerValue(h, HeaderUniqueKey)
	if m.UniqueTTL, err = ParseDuration(fieldUniqueTTL, headerValue(h, HeaderUniqueTTL)); err != nil {
		return m, err
	}
	m.Key = headerValue(h, HeaderKey)
	m.Result = ResultPolicy(headerValue(h, HeaderResult))
	if m.PriorAttempts, err = flowCount(h, HeaderPriorAttempts); err != nil {
		return m, err
	}
	if m.Deferrals, err = flowCount(h, HeaderDeferrals); err != nil {
		return m, err
	}
	m.TraceParent = headerValue(h, HeaderTraceParent)
	m.TraceState = headerValue(h, HeaderTraceState)
	return m, m.Validate()
}

// flowCount is the whole number in header name (0 when absent), one of
// the counts a worker sets on a task it hands back for flow control.
func flowCount(h nats.Header, name string) (int, error) {
	v := headerValue(h, name)
	if v == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		return 0, NewFieldError(fieldFlow, fmt.Errorf("%w: %s %q is not a whole number", ErrInvalidHeader, name, v))
	}
	return n, nil
}

// TaskID returns the id of the task stored at sequence seq of stream, as
// the wire contract falls back: Spool-Task-Id, else Nats-Msg-Id, else (or
// when that id is not a valid task id) the sequence. On SPOOL_TASKS, or
// when stream is empty or not a task partition, the sequence is a decimal
// string. On partition k > 0 it is p<k>-<seq>, because every partition
// numbers its messages from 1 and two tasks must not share an id. The id
// is the task's key in the results bucket.
func (n Names) TaskID(h nats.Header, stream string, seq uint64) string {
	id := h.Get(HeaderTaskID)
	if id == "" {
		id = h.Get(HeaderMsgID)
	}
	if id != "" && ValidateID(id) == nil {
		return id
	}
	if k, ok := n.PartitionOf(stream); ok && k > 0 {
		return "p" + strconv.Itoa(k) + "-" + strconv.FormatUint(seq, 10)
	}
	return strconv.FormatUint(seq, 10)
}

// headerValue returns the first value of key, matching the exact name first
// and then any spelling that differs only in case (some clients canonicalise
// header names, turning Spool-Unique-TTL into Spool-Unique-Ttl).
func headerValue(h nats.Header, key string) string {
	if v := h.Get(key); v != "" {
		return v
	}
	for k, vs := range h {
		if len(vs) > 0 && strings.EqualFold(k, key) {
			return vs[0]
		}
	}
	return ""
}

// FormatScheduleAt renders the Nats-Schedule value for a one-shot schedule
// at t, keeping sub-second precision (nats.go's WithScheduleAt truncates to
// whole seconds).
func FormatScheduleAt(t time.Time) string {
	return "@at " + t.UTC().Format(time.RFC3339Nano)
}

// ReplayOf reads the replay headers of a task: the replay count (0 when
// never replayed or unreadable) and the last replay's time (nil when absent
// or unreadable), for the result document's replays and replayed_at.
func ReplayOf(h nats.Header) (int, *time.Time) {
	n, err := strconv.Atoi(h.Get(HeaderReplays))
	if err != nil || n < 0 {
		return 0, nil
	}
	t, err := time.Parse(time.RFC3339Nano, h.Get(HeaderReplayedAt))
	if err != nil {
		return n, nil
	}
	return n, &t
}

// EnqueueTimes returns when a task stored at stored (its message's stream
// timestamp) was enqueued, and, for a copy Spool published again, when the
// copy was (handedBack; nil for the task's first message). A copy carries
// its first enqueue time in Spool-Enqueued-At; a value that does not parse
// is ignored and the copy counts as first enqueued at stored.
func EnqueueTimes(h nats.Header, stored time.Time) (enqueued time.Time, handedBack *time.Time) {
	v := headerValue(h, HeaderEnqueuedAt)
	if v == "" {
		return stored, nil
	}
	t, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		return stored, nil
	}
	// A copy of stored, taken here, so that the common path (no header)
	// allocates nothing.
	hb := stored
	return t, &hb
}

// KeepEnqueuedAt marks h, the header of a copy of a task about to be
// published again, with the task's first enqueue time: the one h carries
// already, else stored, the stream timestamp of the message it copies.
func KeepEnqueuedAt(h nats.Header, stored time.Time) {
	enqueued, _ := EnqueueTimes(h, stored)
	h.Set(HeaderEnqueuedAt, enqueued.UTC().Format(time.RFC3339Nano))
}
