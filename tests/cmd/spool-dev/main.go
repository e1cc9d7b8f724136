// Command spool-dev runs Spool's development stack in the foreground (make
// run): an embedded JetStream server on 127.0.0.1:4222 with its store in
// .data/, the topology provisioned, a worker with the demo handlers and the
// DLQ router, and the HTTP broker on 127.0.0.1:8080. Ctrl-C stops it
// gracefully.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spoolq/spool/shared/config"
	"github.com/spoolq/spool/shared/logging"
	"github.com/spoolq/spool/streams"
	"github.com/spoolq/spool/tests/devstack"
)

// Config is the dev stack's configuration: the common SPOOL_ settings and
// the topology settings.
type Config struct {
	config.Common
	streams.Settings
	// HTTPToken, when set, is the bearer token the broker requires.
	// SPOOL_HTTP_TOKEN, default none.
	HTTPToken string `envconfig:"HTTP_TOKEN"`
}

// Validate checks both halves.
func (c Config) Validate() error {
	if err := c.Common.Validate(); err != nil {
		return err
	}
	return c.Settings.Validate()
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "spool-dev:", err)
		os.Exit(1)
	}
}

func run() error {
	fs := flag.NewFlagSet("spool-dev", flag.ContinueOnError)
	store := fs.String("store", ".data/nats", "JetStream store directory")
	host := fs.String("host", "127.0.0.1", "NATS listen host")
	port := fs.Int("port", 4222, "NATS client port")
	syncAlways := fs.Bool("sync-always", false, "fsync every write before acknowledging (durable, slower)")
	brokerAddr := fs.String("broker", "127.0.0.1:8080", "HTTP broker listen address (empty: no broker)")
	worker := fs.Bool("worker", true, "run a worker with the demo handlers and the DLQ router")
	metricsAddr := fs.String("metrics", "127.0.0.1:9090", "the worker's Prometheus /metrics listen address (empty: none)")
	if err := fs.Parse(os.Args[1:]); err != nil {
		return err
	}
	if *port < 0 || *port > 65535 {
		return fmt.Errorf("--port %d is not a TCP port", *port)
	}
	var cfg Config
	if err := config.Load(&cfg); err != nil {
		return err
	}
	logger, err := logging.New(os.Stderr, cfg.LogFormat, cfg.LogLevel)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	st, err := devstack.Start(ctx, devstack.Options{
		Host: *host, Port: *port, StoreDir: *store, SyncAlways: *syncAlways,
		Names: cfg.Names(), Settings: cfg.Settings, Logger: logger,
		Worker: *worker, BrokerAddr: *brokerAddr, BrokerToken: cfg.HTTPToken, MetricsAddr: *metricsAddr,
	})
	if err != nil {
		return err
	}
	defer st.Stop()
	printBanner(st, *store)
	<-ctx.Done()
	logger.Info("stopping the dev stack")
	return nil
}

func printBanner(st *devstack.Stack, store string) {
	fmt.Printf("\nSpool dev stack running\n")
	fmt.Printf("  NATS (JetStream)  %s   store %s\n", st.URL, store)
	fmt.Printf("  topology          %s, %s, %s, KV %s and %s\n", st.Names.TaskStream(), st.Names.DLQStream(),
		st.Names.AdvisoryStream(), st.Names.ResultsBucket(), st.Names.UniqueBucket())
	if st.Worker != nil {
		fmt.Printf("  worker            demo.echo, demo.sleep, demo.fail; DLQ router; NATS service spool-consumer\n")
	}
	if st.MetricsURL != "" {
		fmt.Printf("  worker metrics    %s\n", st.MetricsURL)
	}
	if st.BrokerURL != "" {
		fmt.Printf("  HTTP broker       %s   (OpenAPI at %s/v1/openapi.json)\n", st.BrokerURL, st.BrokerURL)
		fmt.Printf(`
  Enqueue:  curl -s %[1]s/v1/tasks -d '{"type":"demo.echo","priority":"high","payload":{"hello":"world"}}'
  Result:   curl -s '%[1]s/v1/tasks/<id>?wait=5s'
  Failing:  curl -s %[1]s/v1/tasks -d '{"type":"demo.fail","payload":{"fail_times":9},"max_retries":1}'
`, st.BrokerURL)
	}
	fmt.Printf(`  Raw:      nats -s %[1]s pub spool.tasks.normal.demo.echo 'hello' -H Spool-Task-Id:t1
  Inspect:  nats -s %[1]s stream ls  ·  nats -s %[1]s kv get spool_results t1
  Fleet:    nats -s %[1]s micro stats spool-consumer
  Status:   go run ./streams/cmd/spool-admin status --url %[1]s
  DLQ:      go run ./streams/cmd/spool-admin dlq list --url %[1]s

Ctrl-C stops everything gracefully.
`, st.URL)
}
