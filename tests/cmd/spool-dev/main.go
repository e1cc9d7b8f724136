// Command spool-dev runs Spool's development stack in the foreground (make
// run): an embedded JetStream server on 127.0.0.1:4222 with its store in
// .data/, the topology provisioned. Ctrl-C stops it gracefully.
package main

import (
	"context"
	"errors"
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
	})
	if err != nil {
		return err
	}
	defer st.Stop()
	fmt.Printf(`
Spool dev stack running
  NATS (JetStream)  %s   store %s
  topology          %s, %s, %s, KV %s and %s provisioned

  Inspect:  nats -s %s stream ls    |  nats -s %s kv ls
  Status:   go run ./streams/cmd/spool-admin status --url %s
  Publish:  nats -s %s pub spool.tasks.normal.demo.echo 'hello'

The producer broker and consumer workers join this stack once they exist;
for now it runs the server and topology only. Ctrl-C stops it.
`, st.URL, *store, st.Names.TaskStream(), st.Names.DLQStream(), st.Names.AdvisoryStream(),
		st.Names.ResultsBucket(), st.Names.UniqueBucket(), st.URL, st.URL, st.URL, st.URL)
	<-ctx.Done()
	logger.Info("stopping the dev stack")
	if errors.Is(context.Cause(ctx), context.Canceled) {
		return nil
	}
	return nil
}
