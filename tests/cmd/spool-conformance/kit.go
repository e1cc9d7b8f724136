package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/spoolq/spool/consumer/spooltest"
	"github.com/spoolq/spool/producer"
	spool "github.com/spoolq/spool/shared"
	"github.com/spoolq/spool/streams"
)

// The deployment the kit provisions. A short ack wait keeps the cases that
// wait for a redelivery short; the worker heartbeats long tasks through it.
const (
	ackWait     = 2 * time.Second
	maxDeliver  = 5
	concurrency = 2
	workerName  = "conformance-worker"
	// startupTimeout bounds how long the worker may take to make its
	// consumers.
	startupTimeout = time.Minute
)

// Kit is one run: the server, the command under test and the kit's own
// connection.
type Kit struct {
	o      options
	logger *slog.Logger
	srv    *spooltest.Server
	nc     *nats.Conn
	js     jetstream.JetStream
	names  spool.Names
	obs    *Observer
	prod   *producer.Client
	// worker is the command under test at the worker levels, driver at
	// the producer level.
	worker *Command
	driver *Driver
	stderr io.Writer
	n      atomic.Int64
}

// startKit starts the server, provisions it and starts the command.
func startKit(ctx context.Context, o options, stderr io.Writer) (*Kit, error) {
	level := slog.LevelWarn
	if o.verbose {
		level = slog.LevelInfo
	}
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	settings := streams.Settings{Consumers: o.consumers, AckWait: ackWait, MaxDeliver: maxDeliver}
	srv, err := spooltest.New(ctx, spooltest.WithSettings(settings), spooltest.WithLogger(logger))
	if err != nil {
		return nil, err
	}
	k := &Kit{o: o, logger: logger, srv: srv, nc: srv.NC, js: srv.JS, names: srv.Names, stderr: stderr}
	if err := k.start(ctx); err != nil {
		_ = k.close()
		return nil, err
	}
	return k, nil
}

func (k *Kit) start(ctx context.Context) error {
	var err error
	if k.obs, err = newObserver(k.srv.URL, k.names); err != nil {
		return err
	}
	if k.prod, err = producer.New(k.nc, producer.WithLogger(k.logger)); err != nil {
		return fmt.Errorf("the kit's producer: %w", err)
	}
	if k.o.level == Producer {
		k.driver, err = startDriver(k.o.command, k.env(), k.stderr, k.o.verbose)
		return err
	}
	k.worker = newCommand(k.o.command, k.env(), k.stderr, k.o.verbose, k.logger)
	if err := k.worker.start(); err != nil {
		return err
	}
	sctx, cancel := context.WithTimeout(ctx, startupTimeout)
	defer cancel()
	if err := k.waitServing(sctx, k.servedTypes()); err != nil {
		if n := k.worker.Exits(); n > 0 {
			err = fmt.Errorf("%w; it exited %d times (-v shows its output)", err, n)
		}
		return fmt.Errorf("the worker did not start: %w", err)
	}
	return nil
}

// close stops the command and the server.
func (k *Kit) close() error {
	var errs []error
	if k.worker != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		errs = append(errs, k.worker.stop(ctx))
		cancel()
	}
	if k.driver != nil {
		errs = append(errs, k.driver.close())
	}
	if k.prod != nil {
		k.prod.Close()
	}
	if k.obs != nil {
		k.obs.close()
	}
	k.srv.Close()
	return errors.Join(errs...)
}

// env is the command's environment: the kit's own without any SPOOL_ or
// NATS_ variable, plus the deployment's settings.
func (k *Kit) env() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "SPOOL_") && !strings.HasPrefix(kv, "NATS_") {
			env = append(env, kv)
		}
	}
	for _, kv := range [][2]string{
		{"SPOOL_NATS_URL", k.srv.URL},
		{"SPOOL_PREFIX", k.names.Prefix()},
		{"SPOOL_CONSUMERS", k.o.consumers},
		{"SPOOL_ACK_WAIT", ackWait.String()},
		{"SPOOL_MAX_DELIVER", strconv.Itoa(maxDeliver)},
		{"SPOOL_DEFAULT_MAX_RETRIES", "3"},
		{"SPOOL_RETRY_BASE", "100ms"},
		{"SPOOL_RETRY_MAX", "1s"},
		{"SPOOL_CONCURRENCY", strconv.Itoa(concurrency)},
		{"SPOOL_CONCURRENCY_MIN", strconv.Itoa(concurrency)},
		{"SPOOL_CONCURRENCY_MAX", strconv.Itoa(concurrency)},
		{"SPOOL_WORKER_NAME", workerName},
		{"SPOOL_PROCESSING_DELAY", "0s"},
		{"SPOOL_SHUTDOWN_TIMEOUT", "3s"},
		{"SPOOL_METRICS_ADDR", "off"},
		{"SPOOL_HTTP_ADDR", "off"},
		{"SPOOL_CONFORMANCE_LEVEL", string(k.o.level)},
	} {
		env = append(env, kv[0]+"="+kv[1])
	}
	return env
}

// id returns a new task id with a readable stem.
func (k *Kit) id(stem string) string {
	return fmt.Sprintf("%s-%d", stem, k.n.Add(1))
}

// servedTypes are the conformance handler types of the kit's level.
func (k *Kit) servedTypes() []string {
	if k.o.level == Full {
		return append(coreTypes[:len(coreTypes):len(coreTypes)], fullTypes...)
	}
	return coreTypes
}

// waitServing waits until every type has a consumer at every priority.
// Pulling by priority, provisioning made them: it waits until the worker
// pulls.
func (k *Kit) waitServing(ctx context.Context, types []string) error {
	return poll(ctx, 100*time.Millisecond, func() error {
		if k.o.consumers == "priority" {
			return k.waitPulling(ctx)
		}
		for _, typ := range types {
			for _, p := range spool.Priorities {
				subj, err := k.names.TaskSubject(p, typ)
				if err != nil {
					return err
				}
				if _, err := k.consumerFor(ctx, subj); err != nil {
					return err
				}
			}
		}
		return nil
	})
}

// poll calls cond every interval until it returns nil or ctx ends, and
// then returns its last error.
func poll(ctx context.Context, interval time.Duration, cond func() error) error {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		err := cond()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last: %v)", ctx.Err(), err)
		case <-t.C:
		}
	}
}

// waitPulling checks that the worker has a pull request waiting on a
// priority consumer: with few slots a worker need not poll them all.
func (k *Kit) waitPulling(ctx context.Context) error {
	for _, p := range spool.Priorities {
		ci, err := k.js.Consumer(ctx, k.names.TaskStream(), k.names.Consumer(p))
		if err != nil {
			return err
		}
		info, err := ci.Info(ctx)
		if err != nil {
			return err
		}
		if info.NumWaiting > 0 {
			return nil
		}
	}
	return errors.New("no pull request waiting on any priority consumer")
}
