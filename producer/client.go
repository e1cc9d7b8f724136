package producer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	spool "github.com/spoolq/spool/shared"
	"github.com/spoolq/spool/shared/jsproto"
	"github.com/spoolq/spool/shared/workflow"
	"github.com/spoolq/spool/streams/admin"
)

// Client enqueues tasks, cancels scheduled ones and reads results. It is
// safe for concurrent use. It never closes the connection it was given.
type Client struct {
	nc      *nats.Conn
	js      jetstream.JetStream
	names   spool.Names
	logger  *slog.Logger
	timeout time.Duration
	acks    *acks // EnqueueBatch's publishes
	quiet   bool  // no enqueued events (WithEnqueuedEvents)
	retry   jsproto.Tries
	served  *served // the types the workers serve (WithUnservedWarnings)

	mu      sync.Mutex
	tasks   jetstream.Stream // task stream, looked up once
	limit   int              // largest task message accepted
	results jetstream.KeyValue
	// resultsLog is the results bucket's stream, whose last message on a
	// key tells a discarded result from a missing one.
	resultsLog jetstream.Stream
	unique     jetstream.KeyValue
	cancels    jetstream.KeyValue
	wf         *workflow.Store
	order      orderCache
	// lastSubject is the task subject EnqueueAsync built last, which the
	// next task most often shares.
	lastSubject atomic.Pointer[lastSubject]
}

// New returns a client publishing on nc. It does no I/O: the task stream
// and buckets are looked up on first use.
func New(nc *nats.Conn, opts ...Option) (*Client, error) {
	if nc == nil {
		return nil, errors.New("producer: nil *nats.Conn")
	}
	o := defaultOptions()
	for _, opt := range opts {
		if err := opt(&o); err != nil {
			return nil, fmt.Errorf("producer option: %w", err)
		}
	}
	js, err := jetstream.New(nc,
		jetstream.WithDefaultTimeout(o.timeout),
		jetstream.WithPublishAsyncMaxPending(o.window),
		jetstream.WithPublishAsyncTimeout(o.timeout),
	)
	if err != nil {
		return nil, fmt.Errorf("opening JetStream: %w", err)
	}
	c := &Client{
		nc:      nc,
		js:      js,
		names:   o.names,
		logger:  o.logger,
		timeout: o.timeout,
		acks:    newAcks(nc, o.timeout, o.window),
		retry:   jsproto.Tries{PerTry: min(jsproto.DefaultPerTry, o.timeout), Conn: nc},
		served:  &served{logger: o.logger},
	}
	if !o.unchecked {
		adm, err := admin.New(nc, admin.WithNames(o.names), admin.WithLogger(o.logger), admin.WithTimeout(ServedCheckTimeout))
		if err != nil {
			return nil, fmt.Errorf("opening the check of task types: %w", err)
		}
		c.served.adm = adm
	}
	c.quiet = o.quiet
	if !c.quiet {
		// The enqueued event goes out as the acknowledgement arrives,
		// whether or not anybody waits for the Pending.
		c.acks.stored = c.enqueued
	}
	return c, nil
}

// Close releases what the client holds on the connection (the reply
// subscription of EnqueueBatch's publishes, a reading of the types the
// workers serve); it does not close the connection. Acks still pending
// are lost: those tasks may be stored, and their batch reports them so.
// The client stays usable.
func (c *Client) Close() {
	c.acks.close()
	c.js.CleanupPublisher()
	c.served.close()
}

// Names returns the names the client publishes under.
func (c *Client) Names() spool.Names { return c.names }

// withTimeout applies the client's default timeout to a context without a
// deadline, as nats.go's wrapContextWithoutDeadline does.
func (c *Client) withTimeout(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, c.timeout)
}

// do runs one JetStream request with the client's retry: each try
// bounded by a short timeout, retried through a leader election within
// ctx (see jsproto.Tries).
func (c *Client) do(ctx context.Context, what string, fn func(ctx context.Context) error) error {
	return c.retry.Do(ctx, what, fn)
}

// cachedLimit returns the largest task message, once taskStream looked
// the stream up.
func (c *Client) cachedLimit() (int, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.limit, c.tasks != nil
}

// taskStream returns the task stream and the largest message it accepts,
// looking them up on first use.
func (c *Client) taskStream(ctx context.Context) (jetstream.Stream, int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.tasks != nil {
		return c.tasks, c.limit, nil
	}
	name := c.names.TaskStream()
	var s jetstream.Stream
	err := c.do(ctx, "looking up stream "+name, func(ctx context.Context) (err error) {
		s, err = c.js.Stream(ctx, name)
		return err
	})
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, 0, &spool.NotProvisionedError{Kind: "stream", Name: name, Err: err}
	}
	if err != nil {
		return nil, 0, fmt.Errorf("looking up stream %q: %w", name, err)
	}
	limit := int(c.nc.MaxPayload())
	if m := int(s.CachedInfo().Config.MaxMsgSize); m > 0 && m < limit {
		limit = m
	}
	c.tasks, c.limit = s, limit
	return s, limit, nil
}

// Ready checks that the connection is up and the task stream answers. The
// HTTP broker's /readyz calls it.
func (c *Client) Ready(ctx context.Context) error {
	if !c.nc.IsConnected() {
		return fmt.Errorf("nats connection is %s", c.nc.Status())
	}
	ctx, cancel := c.withTimeout(ctx)
	defer cancel()
	s, _, err := c.taskStream(ctx)
	if err != nil {
		return err
	}
	if _, err := s.Info(ctx); err != nil {
		return fmt.Errorf("reading stream %q: %w", c.names.TaskStream(), translate(err))
	}
	return nil
}

func (c *Client) resultsBucket(ctx context.Context) (jetstream.KeyValue, error) {
	return c.bucket(ctx, &c.results, c.names.ResultsBucket())
}

// resultsStream returns the stream of the results bucket, looked up on
// first use.
func (c *Client) resultsStream(ctx context.Context) (jetstream.Stream, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.resultsLog != nil {
		return c.resultsLog, nil
	}
	name := "KV_" + c.names.ResultsBucket()
	var s jetstream.Stream
	err := c.do(ctx, "looking up stream "+name, func(ctx context.Context) (err error) {
		s, err = c.js.Stream(ctx, name)
		return err
	})
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, &spool.NotProvisionedError{Kind: "KV bucket", Name: c.names.ResultsBucket(), Err: err}
	}
	if err != nil {
		return nil, fmt.Errorf("looking up stream %q: %w", name, err)
	}
	c.resultsLog = s
	return s, nil
}

func (c *Client) uniqueBucket(ctx context.Context) (jetstream.KeyValue, error) {
	return c.bucket(ctx, &c.unique, c.names.UniqueBucket())
}

func (c *Client) cancelBucket(ctx context.Context) (jetstream.KeyValue, error) {
	return c.bucket(ctx, &c.cancels, c.names.CancelBucket())
}

func (c *Client) bucket(ctx context.Context, slot *jetstream.KeyValue, name string) (jetstream.KeyValue, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if *slot != nil {
		return *slot, nil
	}
	var kv jetstream.KeyValue
	err := c.do(ctx, "opening KV bucket "+name, func(ctx context.Context) (err error) {
		kv, err = c.js.KeyValue(ctx, name)
		return err
	})
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, &spool.NotProvisionedError{Kind: "KV bucket", Name: name, Err: err}
	}
	if err != nil {
		return nil, fmt.Errorf("opening KV bucket %q: %w", name, err)
	}
	*slot = kv
	return kv, nil
}
