// Command goworker is the Go worker the conformance kit proves in the
// project's own tests: consumer.Worker serving the conformance handler
// types, configured by the environment the kit gives every worker under
// test (SPOOL_NATS_URL and the SPOOL_* settings, docs/conformance.md).
//
//	spool-conformance --level full -- goworker
//
// The flag -break names a handler type to break on purpose: its handler
// then returns a wrong result, so a test can show that the kit fails a
// worker that does not conform.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/spoolq/spool/consumer"
	"github.com/spoolq/spool/consumer/service"
	"github.com/spoolq/spool/shared/config"
	"github.com/spoolq/spool/shared/fleet"
	"github.com/spoolq/spool/shared/logging"
	"github.com/spoolq/spool/shared/natsconn"
)

// Config is what the kit sets for a worker.
type Config struct {
	config.Common
	Concurrency       int           `envconfig:"CONCURRENCY" default:"2" desc:"worker slots"`
	RetryBase         time.Duration `envconfig:"RETRY_BASE" default:"100ms" desc:"first retry delay"`
	RetryMax          time.Duration `envconfig:"RETRY_MAX" default:"1s" desc:"longest retry delay"`
	DefaultMaxRetries int           `envconfig:"DEFAULT_MAX_RETRIES" default:"3" desc:"retries without Spool-Max-Retries"`
	WorkerName        string        `envconfig:"WORKER_NAME" default:"conformance-worker" desc:"name in result documents"`
	ProcessingDelay   time.Duration `envconfig:"PROCESSING_DELAY" default:"0s" desc:"write processing for attempts running longer"`
	ShutdownTimeout   time.Duration `envconfig:"SHUTDOWN_TIMEOUT" default:"3s" desc:"longest graceful stop"`
	Level             string        `envconfig:"CONFORMANCE_LEVEL" default:"core" desc:"core or full: full also serves conformance.snooze"`
}

// Validate checks the settings.
func (c *Config) Validate() error {
	if err := c.Common.Validate(); err != nil {
		return err
	}
	if c.Concurrency < 1 {
		return fmt.Errorf("SPOOL_CONCURRENCY: %d must be at least 1", c.Concurrency)
	}
	return nil
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	breakType := flag.String("break", "", "a handler type to break on purpose: it returns a wrong result")
	flag.Parse()
	err := run(ctx, *breakType)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "goworker:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, breakType string) error {
	var cfg Config
	if err := config.Load(&cfg); err != nil {
		return err
	}
	logger, err := logging.New(os.Stderr, cfg.LogFormat, cfg.LogLevel)
	if err != nil {
		return err
	}
	sctx, cancel := context.WithTimeout(ctx, cfg.Startup())
	defer cancel()
	nc, err := natsconn.Connect(sctx, cfg.NATS, "conformance goworker", logger)
	if err != nil {
		return err
	}
	defer nc.Close()
	mux := handlers(cfg.Level == "full", breakType)
	w, err := consumer.New(nc, mux,
		consumer.WithNames(cfg.Names()),
		consumer.WithLogger(logger),
		consumer.WithWorkerName(cfg.WorkerName),
		consumer.WithConcurrency(cfg.Concurrency, cfg.Concurrency),
		consumer.WithRetry(cfg.RetryBase, cfg.RetryMax, cfg.DefaultMaxRetries),
		consumer.WithProcessingDelay(cfg.ProcessingDelay),
		consumer.WithShutdownTimeout(cfg.ShutdownTimeout))
	if err != nil {
		return err
	}
	if err := w.Start(sctx); err != nil {
		return err
	}
	svc, err := service.Add(nc, w, service.WithMetadata(map[string]string{fleet.MetadataHandlers: strings.Join(mux.Types(), ",")}))
	if err != nil {
		return errors.Join(err, w.Stop(context.WithoutCancel(ctx)))
	}
	<-ctx.Done()
	stopCtx, cancelStop := context.WithTimeout(context.WithoutCancel(ctx), cfg.ShutdownTimeout+5*time.Second)
	defer cancelStop()
	return errors.Join(w.Stop(stopCtx), svc.Stop())
}

// handlers registers the conformance handler types.
func handlers(full bool, breakType string) *consumer.Mux {
	mux := consumer.NewMux()
	mux.HandleFunc("conformance.echo", func(_ context.Context, t *consumer.Task) ([]byte, error) {
		return t.Payload, nil
	})
	mux.HandleFunc("conformance.fail", func(_ context.Context, t *consumer.Task) ([]byte, error) {
		var p struct {
			SucceedAt    int `json:"succeed_at"`
			RetryAfterMS int `json:"retry_after_ms"`
		}
		if err := json.Unmarshal(t.Payload, &p); err != nil {
			return nil, consumer.Permanent(fmt.Errorf("payload: %w", err))
		}
		if t.Attempt < p.SucceedAt {
			err := fmt.Errorf("conformance failure on attempt %d", t.Attempt)
			if p.RetryAfterMS > 0 {
				return nil, consumer.RetryAfter(err, time.Duration(p.RetryAfterMS)*time.Millisecond)
			}
			return nil, err
		}
		return json.Marshal(map[string]int{"attempt": t.Attempt})
	})
	mux.HandleFunc("conformance.fatal", func(context.Context, *consumer.Task) ([]byte, error) {
		return nil, consumer.Permanent(errors.New("conformance fatal failure"))
	})
	mux.HandleFunc("conformance.slow", func(ctx context.Context, t *consumer.Task) ([]byte, error) {
		var p struct {
			MS int `json:"ms"`
		}
		if err := json.Unmarshal(t.Payload, &p); err != nil {
			return nil, consumer.Permanent(fmt.Errorf("payload: %w", err))
		}
		timer := time.NewTimer(time.Duration(p.MS) * time.Millisecond)
		defer timer.Stop()
		select {
		case <-timer.C:
			return json.Marshal(map[string]int{"slept_ms": p.MS})
		case <-ctx.Done():
			return nil, fmt.Errorf("interrupted: %w", context.Cause(ctx))
		}
	})
	mux.HandleFunc("conformance.crash", func(_ context.Context, t *consumer.Task) ([]byte, error) {
		var p struct {
			SucceedAt int `json:"succeed_at"`
		}
		if err := json.Unmarshal(t.Payload, &p); err != nil {
			return nil, consumer.Permanent(fmt.Errorf("payload: %w", err))
		}
		if t.Attempt < p.SucceedAt {
			os.Exit(3) // the crash the case asks for: no settling, no ack
		}
		return json.Marshal(map[string]int{"attempt": t.Attempt})
	})
	if full {
		var snoozed sync.Map // task ids snoozed once by this process
		mux.HandleFunc("conformance.snooze", func(_ context.Context, t *consumer.Task) ([]byte, error) {
			var p struct {
				MS int `json:"ms"`
			}
			if err := json.Unmarshal(t.Payload, &p); err != nil {
				return nil, consumer.Permanent(fmt.Errorf("payload: %w", err))
			}
			if _, again := snoozed.LoadOrStore(t.ID, true); !again {
				return nil, consumer.Snooze(time.Duration(p.MS) * time.Millisecond)
			}
			return []byte(`{"snoozed":true}`), nil
		})
	}
	if breakType != "" {
		mux.Use(func(next consumer.Handler) consumer.Handler {
			return consumer.HandlerFunc(func(ctx context.Context, t *consumer.Task) ([]byte, error) {
				out, err := next.ProcessTask(ctx, t)
				if t.Type == breakType && err == nil {
					return []byte(`"broken on purpose"`), nil
				}
				return out, err
			})
		})
	}
	return mux
}
