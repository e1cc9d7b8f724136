package dlqrouter

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	spool "github.com/spoolq/spool/shared"
	"github.com/spoolq/spool/shared/logging"
)

// Option configures a Router.
type Option func(*Router) error

// WithNames sets the names (prefix) of the topology. Default:
// spool.DefaultNames().
func WithNames(names spool.Names) Option {
	return func(r *Router) error {
		if names.Prefix() == "" {
			return errors.New("WithNames: zero Names; build them with spool.NewNames")
		}
		r.names = names
		return nil
	}
}

// WithPrefix sets the topology's prefix, as WithNames with
// spool.NewNames(prefix).
func WithPrefix(prefix string) Option {
	return func(r *Router) error {
		names, err := spool.NewNames(prefix)
		if err != nil {
			return fmt.Errorf("WithPrefix: %w", err)
		}
		r.names = names
		return nil
	}
}

// WithLogger sets the logger. Default (and nil): warnings and errors on
// standard error (logging.OrDefault).
func WithLogger(l *slog.Logger) Option {
	return func(r *Router) error {
		r.logger = logging.OrDefault(l)
		return nil
	}
}

// WithWorker names the router in the result documents it writes.
// Default: dlq-router@<hostname>-<pid>.
func WithWorker(name string) Option {
	return func(r *Router) error {
		if strings.TrimSpace(name) == "" {
			return errors.New("WithWorker: empty name")
		}
		r.worker = name
		return nil
	}
}

// WithEvents sets whether the router publishes a dead event for each task
// it dead-letters (as consumer.WithEvents does for a worker). Default true.
func WithEvents(on bool) Option {
	return func(r *Router) error {
		r.quiet = !on
		return nil
	}
}

// WithBatch sets how many advisories one pull asks for, 1 to 256.
// Default: DefaultBatch (16).
func WithBatch(n int) Option {
	return func(r *Router) error {
		if n < 1 || n > 256 {
			return fmt.Errorf("WithBatch: %d must be 1 to 256", n)
		}
		r.batch = n
		return nil
	}
}

// WithFetchWait sets how long one pull waits for advisories, at least
// 100ms. Stop does not wait for it. Default: DefaultFetchWait (5s).
func WithFetchWait(d time.Duration) Option {
	return func(r *Router) error {
		if d < 100*time.Millisecond {
			return fmt.Errorf("WithFetchWait: %s must be at least 100ms", d)
		}
		r.fetchWait = d
		return nil
	}
}

// WithTimeout bounds the handling of one advisory (read, publish,
// result, delete, ack); it must stay well below the router consumer's
// AckWait (30s). Default: DefaultTimeout (10s).
func WithTimeout(d time.Duration) Option {
	return func(r *Router) error {
		if d < 100*time.Millisecond || d > 25*time.Second {
			return fmt.Errorf("WithTimeout: %s must be 100ms to 25s", d)
		}
		r.timeout = d
		return nil
	}
}

// WithRetryDelay sets the first redelivery delay of an advisory that
// hit a transient error; it doubles with each further failure up to 30s.
// Default: DefaultRetryDelay (1s).
func WithRetryDelay(d time.Duration) Option {
	return func(r *Router) error {
		if d < 10*time.Millisecond || d > maxRouterRetryDelay {
			return fmt.Errorf("WithRetryDelay: %s must be 10ms to %s", d, maxRouterRetryDelay)
		}
		r.retryDelay = d
		return nil
	}
}

// DefaultUnservedDeadline is how long a task may wait for a worker that
// serves its type, where workers pull by type, before the router
// dead-letters it with reason unserved: seven days, long enough for any
// deploy order or outage of one service, short enough that a mistyped
// task does not wait for good.
const DefaultUnservedDeadline = 7 * 24 * time.Hour

// WithUnservedDeadline sets how long a task of a type no worker serves
// waits, where workers pull by type (streams.ConsumersByType), before the
// router dead-letters it with reason unserved; 0 lets it wait for good.
// The router looks every minute, or every half deadline when that is
// shorter. Where workers pull by priority it
// changes nothing: a worker without a handler for the type dead-letters
// the task no_handler. Default: DefaultUnservedDeadline.
func WithUnservedDeadline(d time.Duration) Option {
	return func(r *Router) error {
		if d < 0 || d > 0 && d < time.Second {
			return fmt.Errorf("WithUnservedDeadline: %s must be 0 (never) or at least 1s", d)
		}
		r.unservedAfter = d
		return nil
	}
}
