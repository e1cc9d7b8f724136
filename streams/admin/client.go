package admin

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	spool "github.com/spoolq/spool/shared"
	"github.com/spoolq/spool/shared/jsproto"
	"github.com/spoolq/spool/streams/dlq"
)

// Client inspects and manages one Spool deployment (one prefix). It is
// safe for concurrent use and never closes the connection it was given.
type Client struct {
	nc        *nats.Conn
	js        jetstream.JetStream
	dlq       *dlq.DLQ
	names     spool.Names
	logger    *slog.Logger
	timeout   time.Duration
	fleetWait time.Duration
}

// New returns a client on nc. It does no I/O.
func New(nc *nats.Conn, opts ...Option) (*Client, error) {
	if nc == nil {
		return nil, errors.New("admin: nil *nats.Conn")
	}
	o := defaultOptions()
	for _, opt := range opts {
		if err := opt(&o); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrInvalidOption, err)
		}
	}
	js, err := jetstream.New(nc, jetstream.WithDefaultTimeout(o.timeout))
	if err != nil {
		return nil, fmt.Errorf("opening JetStream: %w", err)
	}
	return &Client{
		nc:        nc,
		js:        js,
		dlq:       dlq.New(js, o.names),
		names:     o.names,
		logger:    o.logger,
		timeout:   o.timeout,
		fleetWait: o.fleetWait,
	}, nil
}

// Names returns the names the client reads under.
func (c *Client) Names() spool.Names { return c.names }

// withTimeout applies the client's timeout to a context without a
// deadline, as nats.go's wrapContextWithoutDeadline does.
func (c *Client) withTimeout(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, c.timeout)
}

// read runs one read: at once ErrNotConnected, naming the connection's
// state, when the connection cannot carry a request, else fn under the
// client's timeout when ctx has no deadline.
func read[T any](ctx context.Context, c *Client, fn func(context.Context) (T, error)) (T, error) {
	if !c.nc.IsConnected() {
		var zero T
		return zero, fmt.Errorf("nats connection is %s: %w", strings.ToLower(c.nc.Status().String()), ErrNotConnected)
	}
	ctx, cancel := c.withTimeout(ctx)
	defer cancel()
	return fn(ctx)
}

// call is read for JetStream requests: each try bounded by a short
// timeout and retried through a leader election within ctx (the client's
// timeout when ctx has none); when that runs out the error says the
// cluster was unavailable and for how long (jsproto.ErrUnavailable).
func call[T any](ctx context.Context, c *Client, what string, fn func(context.Context) (T, error)) (T, error) {
	return read(ctx, c, func(ctx context.Context) (T, error) {
		var out T
		err := jsproto.Tries{PerTry: min(c.timeout, jsproto.DefaultPerTry), Conn: c.nc}.Do(ctx, what, func(ctx context.Context) (err error) {
			out, err = fn(ctx)
			return err
		})
		return out, err
	})
}
