package remote

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/spoolq/spool/consumer"
	spool "github.com/spoolq/spool/shared"
	"github.com/spoolq/spool/shared/fleet"
	"github.com/spoolq/spool/shared/logging"
)

// Route sends the task types matching Pattern to the remote handler on
// Subject.
type Route struct {
	// Pattern matches task types token by token, as NATS subjects do:
	// "email.send" matches that type only, "*" matches one token
	// ("email.*" matches email.send, not email.send.bulk), and a final ">"
	// matches one or more tokens ("email.>", or ">" for every type).
	Pattern string `json:"type"`
	// Subject is the literal request subject of the remote handler;
	// "{type}" in it is replaced by the task type, so one route can send
	// each type to a subject of its own ("spool.remote.{type}").
	Subject string `json:"subject"`
	// Concurrency caps the requests in flight on this route in this
	// process; an attempt beyond it waits for a free place, within its
	// deadline. 0 (the default) means no cap beyond the worker's slots.
	Concurrency int `json:"concurrency,omitempty"`
	// Timeout caps each attempt's wait for the reply, below the task's own
	// deadline (Spool-Timeout or the worker's default). 0 (the default)
	// leaves the task's deadline alone.
	Timeout time.Duration `json:"timeout,omitempty"`
}

// Validate reports what is wrong with r, naming the field.
func (r Route) Validate() error {
	if err := spool.ValidateTypePattern(r.Pattern); err != nil {
		return fmt.Errorf("type pattern: %w", err)
	}
	if err := validatePublishSubject(strings.ReplaceAll(r.Subject, typePlaceholder, "t")); err != nil {
		return fmt.Errorf("subject: %w", err)
	}
	if r.Concurrency < 0 {
		return fmt.Errorf("concurrency: %d is negative (0: no cap)", r.Concurrency)
	}
	if r.Timeout < 0 {
		return fmt.Errorf("timeout: %s is negative (0: the task's own deadline)", r.Timeout)
	}
	return nil
}

// Matches reports whether typ matches the route's pattern.
func (r Route) Matches(typ string) bool { return spool.MatchType(r.Pattern, typ) }

const typePlaceholder = "{type}"

// Routes serves task types by pattern with remote handlers: a
// consumer.Handler that sends each task to the subject of the first route
// whose pattern matches its type, with that route's concurrency cap and
// timeout, and counts each route's calls for the worker's stats. Build it
// with NewRoutes; register it as the fallback of a Mux with Fallback.
type Routes struct {
	routes []*route
	logger *slog.Logger
}

type route struct {
	Route
	handler *handler
	sem     chan struct{} // nil: no cap
	// counters for fleet.RemoteRouteStats
	inFlight, calls, completed, failed, timeouts, noResponders atomic.Int64
}

var _ consumer.Handler = (*Routes)(nil)

// NewRoutes checks routes and returns their handler; the first matching
// route serves a type. nc stays the caller's. A nil logger means logging.OrDefault's;
// opts apply to every route (WithTimeout bounds calls made without a
// deadline).
func NewRoutes(nc *nats.Conn, routes []Route, logger *slog.Logger, opts ...Option) (*Routes, error) {
	if nc == nil {
		return nil, fmt.Errorf("%w: remote routes need a NATS connection", consumer.ErrInvalidOption)
	}
	logger = logging.OrDefault(logger)
	rs := &Routes{logger: logger}
	seen := map[string]bool{}
	for i, r := range routes {
		if err := r.Validate(); err != nil {
			return nil, fmt.Errorf("%w: route %d (%s): %w", consumer.ErrInvalidOption, i+1, r.Pattern, err)
		}
		if seen[r.Pattern] {
			return nil, fmt.Errorf("%w: route %d: type pattern %q is routed twice", consumer.ErrInvalidOption, i+1, r.Pattern)
		}
		seen[r.Pattern] = true
		h := &handler{nc: nc, subject: r.Subject, logger: logger, timeout: DefaultTimeout}
		for _, o := range opts {
			o(h)
		}
		rt := &route{Route: r, handler: h}
		if r.Concurrency > 0 {
			rt.sem = make(chan struct{}, r.Concurrency)
		}
		rs.routes = append(rs.routes, rt)
	}
	return rs, nil
}

// Routes returns the routes, in matching order.
func (rs *Routes) Routes() []Route {
	out := make([]Route, len(rs.routes))
	for i, r := range rs.routes {
		out[i] = r.Route
	}
	return out
}

// Match returns the first route matching typ.
func (rs *Routes) match(typ string) *route {
	for _, r := range rs.routes {
		if r.Matches(typ) {
			return r
		}
	}
	return nil
}

// Serves reports whether a route matches typ.
func (rs *Routes) Serves(typ string) bool { return rs.match(typ) != nil }

// ProcessTask sends t to its route's remote handler; a type no route
// matches fails permanently with consumer.ErrNoHandler.
func (rs *Routes) ProcessTask(ctx context.Context, t *consumer.Task) ([]byte, error) {
	r := rs.match(t.Type)
	if r == nil {
		return nil, consumer.Permanent(fmt.Errorf("%w %q (no remote route matches)", consumer.ErrNoHandler, t.Type))
	}
	if r.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, r.Timeout)
		defer cancel()
	}
	if r.sem != nil {
		select {
		case r.sem <- struct{}{}:
			defer func() { <-r.sem }()
		case <-ctx.Done():
			r.timeouts.Add(1)
			return nil, fmt.Errorf("waiting for a free place on the remote route %s (concurrency %d): %w", r.Pattern, r.Concurrency, ctx.Err())
		}
	}
	r.inFlight.Add(1)
	defer r.inFlight.Add(-1)
	r.calls.Add(1)
	h := r.handler
	if strings.Contains(r.Subject, typePlaceholder) {
		hc := *h
		hc.subject = strings.ReplaceAll(r.Subject, typePlaceholder, t.Type)
		h = &hc
	}
	out, err := h.ProcessTask(ctx, t)
	switch {
	case err == nil:
		r.completed.Add(1)
	case errors.Is(err, context.DeadlineExceeded):
		r.timeouts.Add(1)
	case errors.Is(err, ErrNoResponders):
		r.noResponders.Add(1)
	default:
		r.failed.Add(1)
	}
	return out, err
}

// Stats returns each route's configuration and counters, in matching
// order, for the worker's stats document.
func (rs *Routes) Stats() []fleet.RemoteRouteStats {
	out := make([]fleet.RemoteRouteStats, len(rs.routes))
	for i, r := range rs.routes {
		out[i] = fleet.RemoteRouteStats{
			Pattern: r.Pattern, Subject: r.Subject, Concurrency: r.Concurrency, TimeoutNS: int64(r.Timeout),
			InFlight: r.inFlight.Load(), Calls: uint64(r.calls.Load()), Completed: uint64(r.completed.Load()),
			Failed: uint64(r.failed.Load()), Timeouts: uint64(r.timeouts.Load()), NoResponders: uint64(r.noResponders.Load()),
		}
	}
	return out
}

// Fallback returns a handler that serves a type with mux when mux has a
// handler for it, else with routes when a route matches it, else with mux
// (which dead-letters it with no_handler). mw wraps the routes (the first
// outermost); pass the middleware given to mux.Use so both paths get it.
func Fallback(mux *consumer.Mux, routes *Routes, mw ...consumer.Middleware) consumer.Handler {
	var h consumer.Handler = routes
	for i := len(mw) - 1; i >= 0; i-- {
		h = mw[i](h)
	}
	return consumer.HandlerFunc(func(ctx context.Context, t *consumer.Task) ([]byte, error) {
		if _, ok := mux.Handler(t.Type); !ok && routes.Serves(t.Type) {
			return h.ProcessTask(ctx, t)
		}
		return mux.ProcessTask(ctx, t)
	})
}
