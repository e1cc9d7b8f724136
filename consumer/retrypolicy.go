package consumer

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	spool "github.com/spoolq/spool/shared"
)

// The retry policy: how a handler's return becomes a verdict, the
// verdicts a handler can give (Permanent, RetryAfter, Snooze), and the
// delay before the next attempt (the backoff, RetryDelayFunc, and their
// options).

// verdict is how an attempt ended.
type verdict int

const (
	verdictOK       verdict = iota // the handler succeeded
	verdictFailed                  // an error: retry while attempts remain
	verdictDead                    // dead-letter at once (permanent, no handler, bad input)
	verdictReturned                // shutdown: hand the task back unfinished
	verdictSnoozed                 // run again later without counting the attempt
)

// classify maps the handler's return to a verdict and a dead-letter reason.
func classify(hard, attemptCtx context.Context, r handlerResult) ([]byte, error, verdict, spool.Reason) {
	if r.err == nil {
		return r.out, nil, verdictOK, ""
	}
	var pe *PanicError
	var se *snoozeError
	switch {
	case errors.As(r.err, &se) && hard.Err() == nil:
		return nil, r.err, verdictSnoozed, ""
	case errors.As(r.err, &pe):
		return nil, r.err, verdictFailed, spool.ReasonPanic
	case errors.Is(r.err, ErrNoHandler):
		return nil, r.err, verdictDead, spool.ReasonNoHandler
	case IsPermanent(r.err):
		return nil, r.err, verdictDead, spool.ReasonPermanent
	case hard.Err() != nil:
		return nil, r.err, verdictReturned, ""
	case errors.Is(attemptCtx.Err(), context.DeadlineExceeded) || pastDeadline(attemptCtx):
		return nil, fmt.Errorf("attempt timed out: %w", r.err), verdictFailed, spool.ReasonTimeout
	}
	return nil, r.err, verdictFailed, spool.ReasonError
}

// pastDeadline reports whether ctx's deadline has passed: on a loaded
// machine a handler (or the watch settling it without it) may return
// before the context's own timer has run and set its error.
func pastDeadline(ctx context.Context) bool {
	dl, ok := ctx.Deadline()
	return ok && !time.Now().Before(dl)
}

type permanentError struct{ err error }

func (e permanentError) Error() string { return e.err.Error() }

func (e permanentError) Unwrap() []error {
	return []error{e.err, ErrPermanent}
}

// Permanent marks err as permanent: the task skips its remaining retries and
// goes to the dead-letter stream with reason "permanent". errors.Is(err,
// ErrPermanent) reports true on the result, and the original error stays
// reachable with errors.Is/As.
func Permanent(err error) error {
	if err == nil {
		err = errors.New("permanent failure")
	}
	return permanentError{err: err}
}

// IsPermanent reports whether err was marked with Permanent.
func IsPermanent(err error) bool { return errors.Is(err, ErrPermanent) }

// retryAfterError is a handler's failure that asks for the next attempt
// after Delay instead of the worker's backoff (see RetryAfter).
type retryAfterError struct {
	Err   error
	Delay time.Duration
}

func (e *retryAfterError) Error() string {
	return fmt.Sprintf("%v (retry after %s)", e.Err, e.Delay)
}

func (e *retryAfterError) Unwrap() error { return e.Err }

// RetryAfter marks err so the task is retried after d (at least 0) rather
// than after the backoff. The attempt counts: when it was the last, the
// task is dead-lettered as for any error. A nil err becomes a generic
// failure. errors.Is and errors.As still reach err.
func RetryAfter(err error, d time.Duration) error {
	if err == nil {
		err = errors.New("retry requested")
	}
	return &retryAfterError{Err: err, Delay: max(0, d)}
}

// snoozeError is a handler's verdict that the task should run again after
// Delay without counting the attempt (see Snooze).
type snoozeError struct {
	Delay time.Duration
}

func (e *snoozeError) Error() string { return fmt.Sprintf("snoozed for %s", e.Delay) }

// Snooze returns the verdict that runs the task again after d (at least
// 0) without counting this attempt (not a failure: nothing is logged as
// one).
//
// JetStream counts every delivery and the server stops delivering a task
// after the consumer's MaxDeliver (SPOOL_MAX_DELIVER, 10) deliveries. A
// snooze is a NAK with Delay plus a result document in state snoozed whose
// snoozes field counts the snoozes; the next attempt reads it back and
// subtracts it from the delivery count. Snoozes therefore spend
// deliveries: a task that would be delivered past MaxDeliver by a snooze
// is dead-lettered instead (reason error, "snoozed past the consumer's
// max deliveries").
func Snooze(d time.Duration) error { return &snoozeError{Delay: max(0, d)} }

// RetryDelayFunc chooses the delay before the next attempt of a task of
// type typ whose attempt number attempt failed with err. A negative result
// keeps the worker's backoff (WithRetry, WithRetryJitter). Handlers'
// RetryAfter verdicts take precedence.
type RetryDelayFunc func(typ string, attempt int, err error) time.Duration

// backoff is the delay before the attempt after failed attempt number
// attempt (counting from 1): min(base·2^(attempt-1), maxDelay). It never
// overflows.
func backoff(base, maxDelay time.Duration, attempt int) time.Duration {
	if attempt < 1 {
		attempt = 1
	}
	d := base
	for i := 1; i < attempt; i++ {
		if d >= maxDelay || d > maxDelay/2 {
			return maxDelay
		}
		d *= 2
	}
	return min(d, maxDelay)
}

// jitter adds a uniformly random delay of [0, frac·d) to d, so retries of
// tasks that failed together spread out. frac 0 returns d.
func jitter(d time.Duration, frac float64) time.Duration {
	if frac <= 0 || d <= 0 {
		return d
	}
	return d + time.Duration(rand.Float64()*frac*float64(d))
}

// nextDelay is the delay before the attempt after a failed one: the
// handler's RetryAfter, else the retry-delay function, else the backoff.
func (o config) nextDelay(typ string, attempt int, err error) time.Duration {
	var ra *retryAfterError
	if errors.As(err, &ra) {
		return ra.Delay
	}
	if o.retryDelayFunc != nil {
		if d := o.retryDelayFunc(typ, attempt, err); d >= 0 {
			return d
		}
	}
	return o.retryDelay(attempt)
}

// retryDelay is the NAK delay after failed attempt number attempt.
func (o config) retryDelay(attempt int) time.Duration {
	return jitter(backoff(o.RetryBase, o.RetryMax, attempt), o.RetryJitter)
}

// WithRetry sets the backoff between attempts, min(base·2^(attempt-1),
// maxDelay), and the number of retries after the first attempt for tasks
// without a Spool-Max-Retries header. Default: 1s, 5m and 3.
func WithRetry(base, maxDelay time.Duration, maxRetries int) Option {
	return func(o *config) error {
		if base <= 0 || maxDelay < base {
			return fmt.Errorf("%w: retry base %s max %s: need 0 < base <= max", ErrInvalidOption, base, maxDelay)
		}
		if maxRetries < 0 || maxRetries > spool.MaxMaxRetries {
			return fmt.Errorf("%w: max retries %d must be 0 to %d", ErrInvalidOption, maxRetries, spool.MaxMaxRetries)
		}
		o.RetryBase, o.RetryMax, o.MaxRetries = base, maxDelay, maxRetries
		return nil
	}
}

// WithRetryJitter adds a random delay of up to frac of the backoff (0.2 =
// up to +20%), 0 to 1. Default: 0.2.
func WithRetryJitter(frac float64) Option {
	return func(o *config) error {
		if frac < 0 || frac > 1 {
			return fmt.Errorf("%w: retry jitter %g must be 0 to 1", ErrInvalidOption, frac)
		}
		o.RetryJitter = frac
		return nil
	}
}

// WithRetryDelayFunc sets a retry-delay function, which may differ by task
// type (asynq's RetryDelayFunc, River's NextRetry). Default: none, the
// exponential backoff for every type.
func WithRetryDelayFunc(fn RetryDelayFunc) Option {
	return func(o *config) error {
		if fn == nil {
			return fmt.Errorf("%w: nil retry-delay function", ErrInvalidOption)
		}
		o.retryDelayFunc = fn
		return nil
	}
}
