package dlq

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	spool "github.com/spoolq/spool/shared"
)

// Message is a task on its way to the dead-letter stream. The worker
// builds one from a delivered jetstream.Msg; the DLQ router builds one from
// the *jetstream.RawStreamMsg it read by sequence (see MessageFromRaw).
type Message struct {
	// Subject is the task's subject, spool.tasks.<priority>.<type>.
	Subject string
	// Stream is the task stream (partition) the task was in; "" means
	// SPOOL_TASKS.
	Stream string
	// Seq is the task's sequence in the task stream.
	Seq uint64
	// Header holds the task's headers as stored; it is not modified.
	Header nats.Header
	// Data is the payload, byte for byte.
	Data []byte
	// Reason says why the task is dead.
	Reason spool.Reason
	// Err is the last error, if any.
	Err string
	// Attempts is the number of deliveries made.
	Attempts int
	// FailedAt is when the task was declared dead; zero means now.
	FailedAt time.Time
	// EnqueuedAt is when the task was first enqueued and HandedBackAt,
	// for a copy Spool published again, when the copy was
	// (spool.EnqueueTimes), for the result document.
	EnqueuedAt   time.Time
	HandedBackAt *time.Time
	// StartedAt is when the last attempt started, for the result document;
	// zero when unknown.
	StartedAt time.Time
}

// MessageFromRaw builds a Message from a message read from the task
// stream by sequence (jetstream.Stream.GetMsg), as the DLQ router does.
func MessageFromRaw(m *jetstream.RawStreamMsg, reason spool.Reason, errText string, attempts int) Message {
	enqueued, handedBack := spool.EnqueueTimes(m.Header, m.Time)
	return Message{
		Subject:      m.Subject,
		Seq:          m.Sequence,
		Header:       m.Header,
		Data:         m.Data,
		Reason:       reason,
		Err:          errText,
		Attempts:     attempts,
		EnqueuedAt:   enqueued,
		HandedBackAt: handedBack,
	}
}

// MsgID is the Nats-Msg-Id of the dead letter of task-stream sequence
// seq: dlq-<taskstream>-<seq>. Routing the same task twice (the worker and
// the router, or a retried publish) stores one dead letter within the DLQ
// stream's duplicate window.
func MsgID(names spool.Names, seq uint64) string {
	return PartitionMsgID(names.TaskStream(), seq)
}

// PartitionMsgID is the Nats-Msg-Id of the dead letter of sequence seq of
// task stream stream (a partition's: spool.Names.PartitionStream):
// dlq-<stream>-<seq>.
func PartitionMsgID(stream string, seq uint64) string {
	return "dlq-" + stream + "-" + strconv.FormatUint(seq, 10)
}

// SubjectFor returns the dead-letter subject of a task subject:
// spool.dlq.<priority>.<type>. A subject that does not parse keeps what can
// be recovered: the priority token when it is a valid priority, else
// normal, and the type "unknown": spool.dlq.<priority>.unknown. The original
// subject is always kept in the Spool-Original-Subject header.
func SubjectFor(names spool.Names, subject string) string {
	p, typ, err := names.ParseTaskSubject(subject)
	if err == nil {
		if s, err := names.DLQSubject(p, typ); err == nil {
			return s
		}
	}
	p = spool.Normal
	if rest, ok := strings.CutPrefix(subject, names.Prefix()+".tasks."); ok {
		tok, _, _ := strings.Cut(rest, ".")
		if pp, err := spool.ParsePriority(tok); err == nil {
			p = pp
		}
	}
	s, _ := names.DLQSubject(p, "unknown") // p is valid and "unknown" is a valid type
	return s
}

// Header returns the headers of the dead letter of m: a copy of
// the original headers without JetStream's internal Nats-* headers (stream,
// sequence, subject, timestamp, TTL, message id, schedule and expectation
// headers, which would change or refuse the republish), plus Spool-Error,
// Spool-Reason, Spool-Attempts, Spool-Failed-At (RFC 3339 with nanoseconds,
// UTC), Spool-Original-Subject, Spool-Original-Seq and Nats-Msg-Id
// dlq-<taskstream>-<seq>. A task without Spool-Task-Id gets its id
// (spool.Names.TaskID) there: its Nats-Msg-Id or its sequence.
func Header(names spool.Names, m Message) nats.Header {
	h := nats.Header{}
	for k, v := range m.Header {
		if len(k) >= 5 && strings.EqualFold(k[:5], "nats-") {
			continue
		}
		h[k] = append([]string(nil), v...)
	}
	// The task's Nats-Msg-Id is dropped with the other Nats-* headers, and
	// a sequence names the task only with its partition: a task without
	// Spool-Task-Id gets its id there, so that the dead letter names the
	// task and a replay keeps its id. An invalid one is kept as it was.
	if h.Get(spool.HeaderTaskID) == "" {
		h.Set(spool.HeaderTaskID, names.TaskID(m.Header, m.Stream, m.Seq))
	}
	failedAt := m.FailedAt
	if failedAt.IsZero() {
		failedAt = time.Now()
	}
	h.Set(spool.HeaderError, m.Err)
	h.Set(spool.HeaderReason, string(m.Reason))
	h.Set(spool.HeaderAttempts, strconv.Itoa(m.Attempts))
	h.Set(spool.HeaderFailedAt, failedAt.UTC().Format(time.RFC3339Nano))
	h.Set(spool.HeaderOriginalSubject, m.Subject)
	h.Set(spool.HeaderOriginalSeq, strconv.FormatUint(m.Seq, 10))
	id := MsgID(names, m.Seq)
	if m.Stream != "" {
		id = PartitionMsgID(m.Stream, m.Seq)
	}
	h.Set(spool.HeaderMsgID, id)
	return h
}

// Publish stores m in the dead-letter stream and waits for the
// stream's acknowledgement. Only after it returns nil may the caller remove
// the original from the task stream. A duplicate (the same task sequence
// dead-lettered twice within the duplicate window) is a success.
func Publish(ctx context.Context, js jetstream.JetStream, names spool.Names, m Message) error {
	if m.Reason == "" {
		return errors.New("publishing dead letter: empty reason")
	}
	msg := &nats.Msg{
		Subject: SubjectFor(names, m.Subject),
		Header:  Header(names, m),
		Data:    m.Data,
	}
	ack, err := js.PublishMsg(ctx, msg, jetstream.WithExpectStream(names.DLQStream()))
	if err != nil {
		return fmt.Errorf("publishing dead letter of %s seq %d to %s: %w", m.Subject, m.Seq, msg.Subject, err)
	}
	_ = ack // ack.Duplicate is fine: the dead letter is stored once.
	return nil
}
