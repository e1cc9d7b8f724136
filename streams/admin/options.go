package admin

import (
	"fmt"
	"log/slog"
	"time"

	spool "github.com/spoolq/spool/shared"
	"github.com/spoolq/spool/shared/logging"
)

// Defaults of the client options.
const (
	// DefaultTimeout bounds a call whose context has no deadline (Status,
	// Fleet and Overview as a whole; each JetStream request of the
	// dead-letter operations, which may scan many messages).
	DefaultTimeout = 5 * time.Second
	// DefaultFleetWait is how long Fleet collects the consumers' answers to
	// $SRV.STATS.spool-consumer. A fleet with no member answers at once
	// (no responders).
	DefaultFleetWait = 250 * time.Millisecond
)

// Option configures a Client. Options validate their argument and New
// fails with the first invalid one.
type Option func(*options) error

type options struct {
	names     spool.Names
	logger    *slog.Logger
	timeout   time.Duration
	fleetWait time.Duration
}

func defaultOptions() options {
	return options{
		names:     spool.DefaultNames(),
		logger:    logging.OrDefault(nil),
		timeout:   DefaultTimeout,
		fleetWait: DefaultFleetWait,
	}
}

// WithPrefix derives every subject, stream and bucket name from prefix.
// Default spool.DefaultPrefix ("spool").
func WithPrefix(prefix string) Option {
	return func(o *options) error {
		n, err := spool.NewNames(prefix)
		if err != nil {
			return err
		}
		o.names = n
		return nil
	}
}

// WithNames uses names built elsewhere (config.Common.Names()). Default
// spool.DefaultNames().
func WithNames(names spool.Names) Option {
	return func(o *options) error {
		if names.Prefix() == "" {
			return fmt.Errorf("names: zero spool.Names, build one with spool.NewNames")
		}
		o.names = names
		return nil
	}
}

// WithLogger sets the logger. Default (and nil): warnings and errors on
// standard error (logging.OrDefault).
func WithLogger(l *slog.Logger) Option {
	return func(o *options) error {
		o.logger = logging.OrDefault(l)
		return nil
	}
}

// WithTimeout sets the timeout of a call whose context has no deadline.
// Default DefaultTimeout (5s).
func WithTimeout(d time.Duration) Option {
	return func(o *options) error {
		if d <= 0 {
			return fmt.Errorf("timeout %s: must be positive", d)
		}
		o.timeout = d
		return nil
	}
}

// WithFleetWait sets how long Fleet (and Overview) collect the consumers'
// answers. Default DefaultFleetWait (250ms).
func WithFleetWait(d time.Duration) Option {
	return func(o *options) error {
		if d <= 0 {
			return fmt.Errorf("fleet wait %s: must be positive", d)
		}
		o.fleetWait = d
		return nil
	}
}
