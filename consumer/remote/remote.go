package remote

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/spoolq/spool/consumer"
	spool "github.com/spoolq/spool/shared"
	"github.com/spoolq/spool/shared/logging"
)

// Request headers a remote Handler adds for the responder, and the reply
// header marking a failure permanent. A failure itself is reported with
// spool.HeaderError (Spool-Error).
const (
	HeaderTaskType    = "Spool-Task-Type"
	HeaderPriority    = "Spool-Priority"
	HeaderAttempt     = "Spool-Attempt"
	HeaderMaxAttempts = "Spool-Max-Attempts"
	HeaderDeadline    = "Spool-Deadline"
	HeaderPermanent   = "Spool-Permanent"
)

// DefaultTimeout bounds a remote call whose context has no deadline. The
// worker always gives each attempt a deadline; this applies when a remote
// Handler is called directly.
const DefaultTimeout = time.Minute

// ErrNoResponders means nobody was subscribed to a remote handler's
// subject. The error also matches nats.ErrNoResponders. It is retryable: a
// responder may be starting.
var ErrNoResponders = errors.New("no remote handler is listening")

// Error is a failure reported by a remote handler in its Spool-Error reply
// header. When the reply also said Spool-Permanent: true, the error returned
// by ProcessTask wraps it with consumer.Permanent.
type Error struct {
	// Subject is the remote handler's subject.
	Subject string
	// Message is the Spool-Error header value.
	Message string
}

func (e *Error) Error() string {
	return fmt.Sprintf("remote handler on %q: %s", e.Subject, e.Message)
}

// Option configures a remote Handler.
type Option func(*handler)

// WithLogger sets the logger of a remote Handler. It logs each call at
// debug level. Default (and nil): warnings and errors on standard error
// (logging.OrDefault).
func WithLogger(l *slog.Logger) Option {
	return func(h *handler) { h.logger = logging.OrDefault(l) }
}

// WithTimeout sets how long a call may wait when the context has no
// deadline of its own. Default: DefaultTimeout. It panics unless d is
// positive.
func WithTimeout(d time.Duration) Option {
	if d <= 0 {
		panic(fmt.Sprintf("remote: WithTimeout(%s): must be positive", d))
	}
	return func(h *handler) { h.timeout = d }
}

type handler struct {
	nc      *nats.Conn
	subject string
	logger  *slog.Logger
	timeout time.Duration
}

var _ consumer.Handler = (*handler)(nil)

// Handler returns a consumer.Handler that serves a task type over NATS
// request-reply on subject, so the handler can be written in any language
// with a NATS client. nc stays the caller's: the handler never closes it.
// Handler panics on a nil connection or a subject that is not a literal
// publish subject (empty, wildcards, whitespace), as Mux.Handle does on a bad
// registration.
//
// The reply contract:
//
// Handler sends one request per attempt to subject. The
// request body is the task payload, byte for byte. The request headers are the
// task's own headers as published (Spool-Task-Id, Spool-Max-Retries,
// traceparent, custom headers, ...) with these set by the worker:
//
//	Spool-Task-Id       the task id (also when the publisher set none)
//	Spool-Task-Type     the task type, e.g. email.send
//	Spool-Priority      critical, high, normal, low or idle
//	Spool-Attempt       this attempt, counting from 1
//	Spool-Max-Attempts  the last attempt that will be made
//	Spool-Deadline      when the worker stops waiting for the reply,
//	                    RFC 3339 with nanoseconds, UTC
//
// The responder answers with one message on the request's reply subject
// (header names match in any case):
//
//   - Success: no Spool-Error header. The reply body is the task's result
//     (JSON is stored as JSON in the results bucket; it may be empty).
//   - Retryable failure: header Spool-Error with a message. The task is
//     retried with backoff until its attempts run out; the body is ignored.
//   - Permanent failure: Spool-Error plus Spool-Permanent: true. The task
//     goes to the dead-letter stream at once, with reason "permanent".
//
// A Spool-Error header with an empty value still means failure, and so does
// Spool-Permanent: true alone (a permanent failure). Spool-Permanent takes
// the values of Go's strconv.ParseBool (true, 1, t, TRUE, ...); any other
// value means retryable. Error text longer than a header line should be
// shortened by the responder: headers are single-line.
//
// If nobody listens on the subject, the attempt fails with a retryable error
// saying no remote handler is listening on the subject. If no reply arrives
// before Spool-Deadline, the attempt fails as a timeout; a late reply is
// dropped, so a responder should stop work at the deadline and must tolerate
// the same task arriving again (delivery is at least once). Run responders in
// a queue group to share the load.
//
// A minimal responder with plain nats.go:
//
//	nc.QueueSubscribe("billing.charge", "billing", func(m *nats.Msg) {
//		reply := nats.NewMsg(m.Reply)
//		if err := charge(m.Header.Get("Spool-Task-Id"), m.Data); err != nil {
//			reply.Header.Set("Spool-Error", err.Error())
//			reply.Header.Set("Spool-Permanent", "true") // omit to retry
//		} else {
//			reply.Data = []byte(`{"charged":true}`)
//		}
//		m.RespondMsg(reply)
//	})
//
// Use it as any handler: mux.Handle("billing.charge",
// remote.Handler(nc, "billing.charge")).
func Handler(nc *nats.Conn, subject string, opts ...Option) consumer.Handler {
	if nc == nil {
		panic("remote: Handler: nil *nats.Conn")
	}
	if err := validatePublishSubject(subject); err != nil {
		panic(fmt.Sprintf("remote: Handler: %v", err))
	}
	h := &handler{
		nc:      nc,
		subject: subject,
		logger:  logging.OrDefault(nil),
		timeout: DefaultTimeout,
	}
	for _, o := range opts {
		o(h)
	}
	return h
}

// ProcessTask sends t to the remote handler and turns the reply into a
// result or an error, as the reply contract says.
func (h *handler) ProcessTask(ctx context.Context, t *consumer.Task) ([]byte, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, h.timeout)
		defer cancel()
	}
	req := h.request(ctx, t)
	start := time.Now()
	reply, err := h.nc.RequestMsgWithContext(ctx, req)
	log := h.logger.With("subject", h.subject, "task_id", t.ID, "task_type", t.Type, "attempt", t.Attempt)
	if err != nil {
		log.DebugContext(ctx, "remote handler call failed", "error", err, "duration", time.Since(start))
		return nil, h.requestError(ctx, err)
	}
	log.DebugContext(ctx, "remote handler replied", "duration", time.Since(start), "bytes", len(reply.Data))
	return replyOutcome(h.subject, reply)
}

// request builds the request message: the task's headers (copied, never
// modified) plus the Spool-* headers of the contract.
func (h *handler) request(ctx context.Context, t *consumer.Task) *nats.Msg {
	m := nats.NewMsg(h.subject)
	for k, vs := range t.Headers {
		m.Header[k] = append([]string(nil), vs...)
	}
	set := func(k, v string) {
		// Replace any spelling of k the publisher used, so the responder
		// sees one value whatever case its client matches in.
		for have := range m.Header {
			if strings.EqualFold(have, k) {
				delete(m.Header, have)
			}
		}
		m.Header.Set(k, v)
	}
	set(spool.HeaderTaskID, t.ID)
	set(HeaderTaskType, t.Type)
	set(HeaderPriority, t.Priority.String())
	set(HeaderAttempt, strconv.Itoa(t.Attempt))
	set(HeaderMaxAttempts, strconv.Itoa(t.MaxAttempts))
	if dl, ok := ctx.Deadline(); ok {
		set(HeaderDeadline, dl.UTC().Format(time.RFC3339Nano))
	}
	m.Data = t.Payload
	return m
}

// requestError classifies a failed request. A deadline or cancellation
// keeps the context's error, so the worker counts it as a timeout.
func (h *handler) requestError(ctx context.Context, err error) error {
	switch {
	case errors.Is(err, nats.ErrNoResponders):
		return fmt.Errorf("%w on %q: %w", ErrNoResponders, h.subject, err)
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		if cerr := ctx.Err(); cerr != nil {
			err = cerr
		}
		return fmt.Errorf("waiting for remote handler on %q: %w", h.subject, err)
	case errors.Is(err, nats.ErrMaxPayload):
		// The task plus its headers can never fit: retrying cannot help.
		return consumer.Permanent(fmt.Errorf("sending task to remote handler on %q: %w", h.subject, err))
	default:
		return fmt.Errorf("calling remote handler on %q: %w", h.subject, err)
	}
}

// replyOutcome reads the reply contract off a reply message.
func replyOutcome(subject string, reply *nats.Msg) ([]byte, error) {
	msgs, failed := headerValues(reply.Header, spool.HeaderError)
	permanent := false
	if vs, ok := headerValues(reply.Header, HeaderPermanent); ok && len(vs) > 0 {
		permanent, _ = strconv.ParseBool(strings.TrimSpace(vs[0])) // anything but a true value means retryable
	}
	if !failed && !permanent {
		return reply.Data, nil
	}
	msg := strings.TrimSpace(strings.Join(msgs, "; "))
	if msg == "" {
		msg = "failed without a " + spool.HeaderError + " message"
	}
	rerr := &Error{Subject: subject, Message: msg}
	if permanent {
		return nil, consumer.Permanent(rerr)
	}
	return nil, rerr
}

// headerValues returns the values of key in any case (some clients
// canonicalise header names: spool-error, Spool-Error) and whether the
// header is present at all.
func headerValues(h nats.Header, key string) ([]string, bool) {
	if vs, ok := h[key]; ok {
		return vs, true
	}
	for k, vs := range h {
		if strings.EqualFold(k, key) {
			return vs, true
		}
	}
	return nil, false
}

// validatePublishSubject accepts a literal NATS subject: dot-separated,
// non-empty tokens without wildcards or whitespace.
func validatePublishSubject(s string) error {
	if s == "" {
		return fmt.Errorf("%w: empty", spool.ErrInvalidSubject)
	}
	for tok := range strings.SplitSeq(s, ".") {
		if tok == "" {
			return fmt.Errorf("%w: %q has an empty token", spool.ErrInvalidSubject, s)
		}
		if tok == "*" || tok == ">" {
			return fmt.Errorf("%w: %q has a wildcard; a remote handler needs a literal subject", spool.ErrInvalidSubject, s)
		}
		if strings.ContainsAny(tok, " \t\r\n") {
			return fmt.Errorf("%w: %q contains whitespace", spool.ErrInvalidSubject, s)
		}
	}
	return nil
}
