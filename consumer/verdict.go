package consumer

import (
	"errors"
	"fmt"
	"time"
)

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
