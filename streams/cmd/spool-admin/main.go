// Command spool-admin provisions Spool's JetStream topology and reports the
// queue's status.
//
//	spool-admin provision          create or update streams, consumers and buckets
//	spool-admin status [--json]    pending, in flight and oldest wait per priority
//	spool-admin dlq list|show|replay|purge   manage dead letters
//	spool-admin pause <priority> [--for D | --until T]   pause a priority fleet-wide
//	spool-admin resume <priority>                        resume it
//	spool-admin pause type <type> [--for D | --until T]  pause a task type fleet-wide
//	spool-admin resume type <type>                       resume it
//	spool-admin schedule list|set|pause|resume|delete    periodic tasks
//	spool-admin workflows list|show|cancel|retry   manage workflows
//	spool-admin limits ls|set|rm|unblock   flow-control rules and their usage
//
// Configuration comes from SPOOL_ environment variables (spool-admin help
// lists them); --url overrides SPOOL_NATS_URL.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"
	_ "time/tzdata" // schedules' time zones resolve without the system tz database

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/spoolq/spool/shared/cli"
	"github.com/spoolq/spool/shared/config"
	"github.com/spoolq/spool/shared/jsproto"
	"github.com/spoolq/spool/shared/logging"
	"github.com/spoolq/spool/shared/natsconn"
	"github.com/spoolq/spool/streams"
	"github.com/spoolq/spool/streams/admin"
)

// Config is spool-admin's configuration.
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

const usage = `usage: spool-admin <command> [flags]

commands:
  provision   create or update Spool's streams, consumers and KV buckets
  status      show pending, in-flight and oldest wait per priority, DLQ size, results
  dlq         list, show, replay and purge dead letters (spool-admin dlq help)
  pause P     pause priority P for the whole fleet (--for D or --until T; default until resumed)
  resume P    resume priority P
  pause type T   pause task type T for the whole fleet (its tasks are parked; --for, --until, --reason, --by)
  resume type T  resume task type T (the workers move its parked tasks back)
  schedule    list, set, pause, resume and delete periodic tasks (spool-admin schedule help)
  workflows   list, show, cancel and retry workflows (spool-admin workflows help)
  limits      flow-control rules: ls, set, rm, unblock (spool-admin limits help)
  help        show this text and the environment variables

flags of provision and status:
  --url URL   NATS server URL (overrides SPOOL_NATS_URL)
  --json      (status) print JSON
  --timeout D time allowed for the command (default 30s)
  -v          also log informational lines (connections, objects created) on stderr;
              without it a command prints its answer and only warnings and errors
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(cli.Exit(os.Stderr, "spool-admin", err))
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return errors.New("no command given")
	}
	cmd, args := args[0], args[1:]
	fs := cli.NewFlagSet("spool-admin " + cmd)
	verbose := cli.Verbose(fs)
	url := fs.String("url", "", "NATS server URL (overrides SPOOL_NATS_URL)")
	asJSON := fs.Bool("json", false, "print JSON (status)")
	timeout := fs.Duration("timeout", 30*time.Second, "time allowed for the command")
	switch cmd {
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		fmt.Fprintf(stdout, "\nenvironment:\n%s", config.Usage(&Config{}))
		return nil
	case "provision", "status":
	case "dlq":
		return runDLQ(ctx, args, stdout, stderr)
	case "pause", "resume":
		return runPause(ctx, cmd, args, stdout, stderr)
	case "schedule":
		return runSchedule(ctx, args, stdout, stderr)
	case "workflows":
		return runWorkflows(ctx, args, stdout, stderr)
	case "limits":
		return runLimits(ctx, args, stdout, stderr)
	default:
		return fmt.Errorf("unknown command %q (spool-admin help lists the commands)", cmd)
	}
	if err := cli.Parse(fs, args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprintf(stdout, "usage: spool-admin %s [flags]\n\nflags:\n", cmd)
			cli.PrintFlags(stdout, fs)
		}
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%s takes no arguments, got %q", cmd, fs.Args())
	}
	ctx, sess, done, err := openFor(ctx, *url, *verbose, *timeout, stderr)
	if err != nil {
		return err
	}
	defer done()
	cfg, js, logger := sess.cfg, sess.js, sess.logger
	names := cfg.Names()
	switch cmd {
	case "provision":
		topo, err := streams.New(names, cfg.Settings)
		if err != nil {
			return err
		}
		// Provisioning is idempotent: a try that met a leader election
		// is run again whole within --timeout, each try given the time a
		// replicated stream's creation takes.
		retry := jsproto.Tries{PerTry: provisionPerTry, Logger: logger, Conn: js.Conn()}
		err = retry.Do(ctx, "provisioning", func(ctx context.Context) error {
			return streams.Provision(ctx, js, topo, logger)
		})
		if err != nil {
			return err
		}
		consumers := "5 priority consumers"
		if tasks, err := js.Stream(ctx, names.TaskStream()); err == nil && streams.ConsumersOf(tasks.CachedInfo().Config) == streams.ConsumersByType {
			consumers = "workers pulling by type (each makes the consumers of its types)"
		}
		fmt.Fprintf(stdout, "provisioned %s, %s, %s, %s, KV %s, %s, %s, %s, %s and %s\n",
			names.TaskStream(), names.DLQStream(), names.AdvisoryStream(), consumers, names.ResultsBucket(), names.UniqueBucket(),
			names.CancelBucket(), names.LimitsBucket(), names.LeasesBucket(), names.WorkflowsBucket())
		return nil
	default: // status
		st, err := sess.admin.Status(ctx)
		if err != nil {
			return err
		}
		if *asJSON {
			enc := json.NewEncoder(stdout)
			enc.SetIndent("", "  ")
			return enc.Encode(st)
		}
		return printStatus(stdout, st)
	}
}

// provisionPerTry bounds one try of provisioning the whole topology.
const provisionPerTry = 15 * time.Second

// session is a connection made from the environment.
type session struct {
	cfg    Config
	nc     *nats.Conn
	js     jetstream.JetStream
	admin  *admin.Client
	logger *slog.Logger
}

// openFor checks the --timeout flag's value, bounds ctx with it and opens a
// session; done closes the connection and ends the context.
func openFor(ctx context.Context, url string, verbose bool, timeout time.Duration, stderr io.Writer) (context.Context, *session, func(), error) {
	if timeout <= 0 {
		return nil, nil, nil, fmt.Errorf("--timeout %s must be positive", timeout)
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	sess, err := open(ctx, url, verbose, stderr)
	if err != nil {
		cancel()
		return nil, nil, nil, err
	}
	return ctx, sess, func() { sess.nc.Close(); cancel() }, nil
}

// open loads the configuration (url, when set, overrides SPOOL_NATS_URL) and
// connects, logging only warnings and errors unless verbose.
func open(ctx context.Context, url string, verbose bool, stderr io.Writer) (*session, error) {
	var cfg Config
	if err := config.Load(&cfg); err != nil {
		return nil, err
	}
	if url != "" {
		cfg.URL = url // the flag wins over SPOOL_NATS_URL
		if err := cfg.Validate(); err != nil {
			return nil, fmt.Errorf("--url: %s", strings.TrimPrefix(err.Error(), "SPOOL_NATS_URL: "))
		}
	}
	logger, err := logging.New(stderr, cfg.LogFormat, cli.LogLevel(cfg.LogLevel, verbose))
	if err != nil {
		return nil, err
	}
	for _, w := range config.Warnings(os.Environ()) {
		logger.Warn(w)
	}
	nc, err := natsconn.Connect(ctx, cfg.NATS, "spool-admin", logger)
	if err != nil {
		return nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("opening JetStream: %w", err)
	}
	adm, err := admin.New(nc, admin.WithNames(cfg.Names()), admin.WithLogger(logger))
	if err != nil {
		nc.Close()
		return nil, err
	}
	return &session{cfg: cfg, nc: nc, js: js, admin: adm, logger: logger}, nil
}

func printStatus(w io.Writer, st admin.Status) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "priority\tpending\tin flight\tredelivered\toldest wait\tpaused\t")
	for _, p := range st.Priorities {
		wait := "-"
		if p.OldestWait > 0 {
			wait = p.OldestWait.Round(time.Millisecond).String()
		}
		paused := "-"
		switch {
		case p.PausedUntil != nil && p.PausedUntil.Equal(admin.Forever):
			paused = "until resumed"
		case p.PausedUntil != nil:
			paused = "until " + p.PausedUntil.UTC().Format(time.RFC3339)
		case p.Paused:
			paused = "yes"
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%s\t%s\t\n", p.Priority, p.Pending, p.InFlight, p.Redelivered, wait, paused)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if _, err := fmt.Fprintf(w, "\nscheduled %d · parked %d · held for a key's turn %d · in waiting rooms %d\ndead letters %d · results %d · task store %d bytes\n",
		st.Scheduled, st.Parked, st.Held, st.WaitingRoom, st.DeadLetters, st.Results, st.StoreBytes); err != nil {
		return err
	}
	if err := printUnserved(w, st.Unserved); err != nil {
		return err
	}
	if len(st.Types) > 0 {
		fmt.Fprintln(w)
		tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "type\tparked\tpaused\tby\treason\t")
		for _, ts := range st.Types {
			paused, by, reason := "-", "-", "-"
			if ts.Pause != nil {
				paused = "until resumed"
				if ts.Pause.Until != nil {
					paused = "until " + ts.Pause.Until.UTC().Format(time.RFC3339)
				}
				by, reason = orDash(ts.Pause.By), orDash(ts.Pause.Reason)
			}
			fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t\n", ts.Type, ts.Parked, paused, by, reason)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	if st.LimitsError != "" {
		_, err := fmt.Fprintf(w, "\nflow-control limits: unreadable: %s\n", st.LimitsError)
		return err
	}
	if len(st.Limits) == 0 {
		return nil
	}
	fmt.Fprintln(w, "\nflow-control limits (tasks handed back wait among the scheduled):")
	return printUsage(w, st.Limits)
}

// printUnserved lists the queued task types no worker serves, where
// workers pull by type: their tasks wait until a worker serving them
// starts.
func printUnserved(w io.Writer, unserved []admin.UnservedType) error {
	if len(unserved) == 0 {
		return nil
	}
	fmt.Fprintln(w, "\ntask types no worker serves (their tasks wait until a worker serving them starts):")
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "type\tpriority\tqueued\toldest wait\t")
	for _, u := range unserved {
		wait := "-"
		if u.OldestWait > 0 {
			wait = u.OldestWait.Round(time.Millisecond).String()
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t\n", u.Type, u.Priority, u.Queued, wait)
	}
	return tw.Flush()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
