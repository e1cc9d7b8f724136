package jsproto_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/spoolq/spool/shared/jsproto"
)

func TestRetryable(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{nil, false},
		{context.Canceled, false},
		{context.DeadlineExceeded, true},
		{fmt.Errorf("get: %w", nats.ErrTimeout), true},
		{nats.ErrNoResponders, true},
		{fmt.Errorf("looking up stream: %w", nats.ErrReconnectBufExceeded), true},
		{jetstream.ErrNoStreamResponse, true},
		{jetstream.ErrJetStreamNotEnabled, true},
		{&jetstream.APIError{Code: 500, ErrorCode: 10009}, true},
		{&jetstream.APIError{Code: 503, ErrorCode: 10008}, true},
		{&jetstream.APIError{Code: 503, ErrorCode: 10047}, false}, // storage full
		{jetstream.ErrStreamNotFound, false},
		{jetstream.ErrConsumerNotFound, false},
		{fmt.Errorf("%w: %w", jetstream.ErrNoStreamResponse, jetstream.ErrStreamNotFound), false},
		{jetstream.ErrKeyNotFound, false},
		{errors.New("bad request"), false},
		// A KV listing's error (nats.go's legacy API) says the same.
		{fmt.Errorf("listing cancelled tasks: %w", &nats.APIError{Code: 503, ErrorCode: 10008}), true},
		{&nats.APIError{Code: 503, ErrorCode: 10047}, false},
		// A shorter retry that ran out may be tried again, whatever its
		// last try's error was.
		{&jsproto.UnavailableError{What: "reading", Tries: 3, Err: context.DeadlineExceeded}, true},
		{fmt.Errorf("reading: %w", &jsproto.UnavailableError{What: "reading", Tries: 1, Err: context.Canceled}), true},
	} {
		if got := jsproto.Retryable(tc.err); got != tc.want {
			t.Errorf("Retryable(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}

func TestRetryDo(t *testing.T) {
	t.Run("retries until it succeeds", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			defer cancel()
			tries, retries := 0, 0
			r := jsproto.Tries{PerTry: time.Second, OnRetry: func(error) { retries++ }}
			err := r.Do(ctx, "reading", func(ctx context.Context) error {
				tries++
				if tries < 3 {
					<-ctx.Done() // a request the election swallowed
					return ctx.Err()
				}
				return nil
			})
			if err != nil || tries != 3 || retries != 2 {
				t.Fatalf("err %v after %d tries, %d retries; want nil after 3 and 2", err, tries, retries)
			}
		})
	})
	t.Run("a 404 fails at once", func(t *testing.T) {
		tries := 0
		err := jsproto.Tries{}.Do(t.Context(), "binding", func(context.Context) error {
			tries++
			return jetstream.ErrStreamNotFound
		})
		if !errors.Is(err, jetstream.ErrStreamNotFound) || tries != 1 {
			t.Fatalf("err %v after %d tries; want the 404 after 1", err, tries)
		}
	})
	t.Run("the deadline says the cluster was unavailable", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
			defer cancel()
			start := time.Now()
			err := jsproto.Tries{PerTry: time.Second}.Do(ctx, "reading the result of task a", func(ctx context.Context) error {
				return nats.ErrNoResponders
			})
			var ue *jsproto.UnavailableError
			if !errors.As(err, &ue) || !errors.Is(err, jsproto.ErrUnavailable) || !errors.Is(err, nats.ErrNoResponders) {
				t.Fatalf("err %v; want an UnavailableError wrapping no responders", err)
			}
			if ue.For != 5*time.Second || time.Since(start) != 5*time.Second || ue.Tries < 5 {
				t.Fatalf("tried %d times for %s; want the whole 5s budget", ue.Tries, ue.For)
			}
			t.Log(err)
		})
	})
	t.Run("the caller's cancellation is no unavailability", func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		err := jsproto.Tries{}.Do(ctx, "reading", func(context.Context) error {
			cancel()
			return nats.ErrTimeout
		})
		if !errors.Is(err, context.Canceled) || errors.Is(err, jsproto.ErrUnavailable) {
			t.Fatalf("err %v; want the cancellation", err)
		}
	})
}
