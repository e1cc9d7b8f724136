package jsproto

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Riding out elections. A JetStream API request or publish that reaches a
// server during a leader change may never be answered: the request is
// swallowed, and a caller that waits on it waits for its whole deadline.
// Every request Spool sends is therefore bounded by a short per-try
// timeout and retried, with backoff, within the caller's own deadline
// (Tries.Do). What retrying can cure is decided in one place (Retryable);
// anything else (a 404, a bad request, a refused write) fails at once.

// DefaultPerTry is the per-try timeout of Tries when PerTry is 0: longer
// than a healthy cluster's slowest answer under load, shorter than an
// election (a few seconds).
const DefaultPerTry = 2 * time.Second

// DefaultLogEvery is how often a Tries with a Logger says what it still
// waits for, when LogEvery is 0.
const DefaultLogEvery = 10 * time.Second

// Backoff between tries: from retryMinWait, doubling, up to retryMaxWait,
// with jitter so that clients cut off together do not come back together.
const (
	retryMinWait = 50 * time.Millisecond
	retryMaxWait = time.Second
)

// ErrUnavailable is matched by the error of a call whose retry budget ran
// out while the cluster did not answer (errors.Is). The error is an
// *UnavailableError saying for how long it tried.
var ErrUnavailable = errors.New("the NATS cluster was unavailable")

// ErrBehind is returned by a read that saw less than it knows must be
// stored: a KV watch is an ephemeral consumer that the server may place
// on a replica still catching up after a restart, whose initial values
// then end early without an error. Retryable holds: the next try's watch
// may land on a current replica, and the lagging one catches up.
var ErrBehind = errors.New("read from a replica that is behind")

// UnavailableError is the error of a call that retried until its
// deadline without an answer. errors.Is(err, ErrUnavailable) holds, and
// so it does for the last try's error.
type UnavailableError struct {
	// What is what the call tried to do ("reading the result of task x").
	What string
	// For is how long it tried; Tries how many times.
	For   time.Duration
	Tries int
	// Err is the last try's error.
	Err error
}

func (e *UnavailableError) Error() string {
	return fmt.Sprintf("%s: %s: tried %d times for %s: %v", e.What, ErrUnavailable, e.Tries, e.For.Round(time.Millisecond), e.Err)
}

// Unwrap returns ErrUnavailable and the last try's error.
func (e *UnavailableError) Unwrap() []error { return []error{ErrUnavailable, e.Err} }

// Retryable reports whether err is one that retrying can cure: a request
// that timed out or found no responder, a lost or reconnecting
// connection, a publish no stream answered, or a JetStream API error that
// says the cluster is between leaders ("temporarily unavailable", "not
// leader", offline). A full store (also a 503) is not, nor a permissions
// violation: the user lacks the right, which no retry cures. A caller's own
// cancellation is not retryable; a per-try deadline is, and so is an
// *UnavailableError: a call whose shorter retry budget ran out may be
// tried again by a caller with a longer one.
func Retryable(err error) bool {
	if err == nil || NotFound(err) ||
		errors.Is(err, ErrDenied) || errors.Is(err, nats.ErrPermissionViolation) {
		return false
	}
	var unavailable *UnavailableError
	if errors.As(err, &unavailable) {
		return true
	}
	if errors.Is(err, context.Canceled) {
		return false
	}
	switch {
	case errors.Is(err, context.DeadlineExceeded),
		errors.Is(err, nats.ErrTimeout),
		errors.Is(err, nats.ErrNoResponders),
		errors.Is(err, nats.ErrConnectionReconnecting),
		errors.Is(err, nats.ErrDisconnected),
		// Publishes buffered while the connection reconnects filled its
		// reconnect buffer: the connection is coming back.
		errors.Is(err, nats.ErrReconnectBufExceeded),
		errors.Is(err, jetstream.ErrNoStreamResponse),
		errors.Is(err, jetstream.ErrAsyncPublishTimeout),
		errors.Is(err, jetstream.ErrJetStreamNotEnabled),
		errors.Is(err, ErrBehind):
		return true
	}
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) {
		return clusterErrorCodes[apiErr.ErrorCode]
	}
	// nats.go's KV watches and key listings subscribe through its legacy
	// JetStream API, whose errors are of its own type.
	var legacyErr *nats.APIError
	if errors.As(err, &legacyErr) {
		return clusterErrorCodes[jetstream.ErrorCode(legacyErr.ErrorCode)]
	}
	return false
}

// NotFound reports a real 404: the stream, consumer or bucket does not
// exist. It fails at once, whatever else the error says.
func NotFound(err error) bool {
	return errors.Is(err, jetstream.ErrStreamNotFound) || errors.Is(err, jetstream.ErrConsumerNotFound) ||
		errors.Is(err, jetstream.ErrBucketNotFound)
}

// clusterErrorCodes are the JetStream error codes of a cluster between
// leaders (nats-server server/errors.json).
var clusterErrorCodes = map[jetstream.ErrorCode]bool{
	10006: true, // JSClusterNotActiveErr: JetStream not in clustered mode (yet)
	10008: true, // JSClusterNotAvailErr: JetStream system temporarily unavailable
	10009: true, // JSClusterNotLeaderErr: JetStream cluster can not handle request
	10074: true, // JSClusterNoPeersErr: no suitable peers for placement
	10118: true, // JSStreamOfflineErr: stream is offline
	10119: true, // JSConsumerOfflineErr: consumer is offline
}

// Tries runs a request, bounding each try by PerTry and retrying what
// Retryable accepts until it succeeds or the caller's context ends. The
// zero value is ready to use.
type Tries struct {
	// PerTry bounds each try (default DefaultPerTry). A try also ends
	// with the caller's context.
	PerTry time.Duration
	// Logger, when set, is told what is waited for every LogEvery
	// (default DefaultLogEvery) while tries keep failing: start-up uses
	// it. Nil logs nothing.
	Logger   *slog.Logger
	LogEvery time.Duration
	// OnRetry, when set, is called before each retry with the error of
	// the try that failed (to count retries, or to heartbeat a message
	// whose write is retried).
	OnRetry func(err error)
	// Conn, when set, is the connection the tries use: a try the server
	// refuses for its user's permissions ends the call at once with a
	// *DeniedError instead of waiting for a reply that never comes. Other
	// requests on Conn refused in the same moment may be reported too.
	Conn *nats.Conn
}

// Do calls fn until it returns nil or an error Retryable refuses, each
// call under a context bounded by PerTry. When ctx ends while tries still
// fail it returns an *UnavailableError saying what (what) was tried, how
// often and for how long, wrapping the last try's error; a ctx cancelled
// by the caller (not its deadline) returns the cancellation wrapping the
// last error.
func (r Tries) Do(ctx context.Context, what string, fn func(ctx context.Context) error) error {
	perTry := r.PerTry
	if perTry <= 0 {
		perTry = DefaultPerTry
	}
	logEvery := r.LogEvery
	if logEvery <= 0 {
		logEvery = DefaultLogEvery
	}
	start := time.Now()
	nextLog := start.Add(logEvery)
	wait := retryMinWait
	for tries := 1; ; tries++ {
		err, denied := r.try(ctx, perTry, fn)
		if err == nil {
			return nil
		}
		if denied != nil {
			return Denied(what, r.Conn.Opts.User, denied)
		}
		// A try cancelled while the caller's context is not: nats.go
		// cancels a request whose connection changed under it.
		triedAgain := Retryable(err) || ctx.Err() == nil && errors.Is(err, context.Canceled) && !NotFound(err)
		if !triedAgain {
			return err
		}
		if ctx.Err() != nil {
			return r.gaveUp(ctx, what, start, tries, err)
		}
		if r.Logger != nil && time.Now().After(nextLog) {
			r.Logger.WarnContext(ctx, "waiting for the NATS cluster to answer", "waiting_for", what,
				"waited", time.Since(start).Round(time.Second).String(), "tries", tries, "error", err)
			nextLog = time.Now().Add(logEvery)
		}
		if r.OnRetry != nil {
			r.OnRetry(err)
		}
		d := wait/2 + rand.N(wait/2+1)
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return r.gaveUp(ctx, what, start, tries, err)
		case <-t.C:
		}
		wait = min(2*wait, retryMaxWait)
	}
}

// try runs fn once under perTry. With Conn set it also returns a
// permissions violation the connection reported while fn ran, and ends fn
// as soon as one is seen.
func (r Tries) try(ctx context.Context, perTry time.Duration, fn func(ctx context.Context) error) (err, denied error) {
	if r.Conn == nil {
		tctx, cancel := context.WithTimeout(ctx, perTry)
		defer cancel()
		return fn(tctx), nil
	}
	prev := r.Conn.LastError()
	cctx, cancelCause := context.WithCancelCause(ctx)
	defer cancelCause(nil)
	tctx, cancel := context.WithTimeout(cctx, perTry)
	defer cancel()
	stop := watchDenied(tctx, r.Conn, prev, cancelCause)
	err = fn(tctx)
	stop()
	if err == nil {
		return nil, nil
	}
	return err, newViolation(r.Conn, prev)
}

func (r Tries) gaveUp(ctx context.Context, what string, start time.Time, tries int, err error) error {
	if errors.Is(context.Cause(ctx), context.Canceled) {
		return fmt.Errorf("%s: %w (last error: %w)", what, context.Cause(ctx), err)
	}
	return &UnavailableError{What: what, For: time.Since(start), Tries: tries, Err: err}
}
