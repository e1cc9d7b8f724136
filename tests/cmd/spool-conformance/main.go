// Command spool-conformance proves that a producer or a worker written in
// any language meets a conformance level of Spool's wire contract:
//
//	spool-conformance --level producer|core|full -- <command> [args...]
//
// It starts its own nats-server with JetStream on 127.0.0.1 and a free port,
// its store in a temporary directory, provisions the topology with workers
// pulling by type, and runs the command with the environment a Spool process
// reads (SPOOL_NATS_URL and the SPOOL_* settings). At the worker levels the
// command is a worker serving the conformance handler types; at the producer
// level it is a driver that reads one JSON request a line on stdin and
// answers one JSON line on stdout. Each case drives the command and checks
// its effects on the wire only: result documents, the dead-letter stream,
// acks, events, stream and consumer state. The kit prints a table of cases
// with pass, fail or not covered and why, and exits 1 when a case failed.
//
// docs/conformance.md describes the handler types, the driver protocol, the
// environment and every case.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// options are the command line's settings.
type options struct {
	level   Level
	list    bool
	run     string
	skip    string
	timeout time.Duration
	verbose bool
	// consumers is how the provisioned deployment pulls: type or
	// priority.
	consumers string
	command   []string
}

func parseArgs(args []string, stderr io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("spool-conformance", flag.ContinueOnError)
	fs.SetOutput(stderr)
	level := fs.String("level", "core", "conformance level: producer, core or full")
	fs.BoolVar(&o.list, "list", false, "list the cases of the level and exit")
	fs.StringVar(&o.run, "run", "", "run only the cases whose name matches this regular expression")
	fs.StringVar(&o.skip, "skip", "", "report the cases whose name matches this regular expression as not covered, without running them")
	fs.DurationVar(&o.timeout, "timeout", 30*time.Second, "time each case may take")
	fs.BoolVar(&o.verbose, "v", false, "copy the command's output and the kit's log to stderr")
	fs.StringVar(&o.consumers, "consumers", "type", "how workers pull in the deployment the kit provisions: type or priority")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: spool-conformance --level producer|core|full [--consumers type|priority] [--run REGEXP] [--skip REGEXP] [--timeout D] [-v] -- COMMAND [ARGS...]\n"+
			"       spool-conformance --level LEVEL --list\n\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	var err error
	if o.level, err = parseLevel(*level); err != nil {
		return o, err
	}
	if o.consumers != "type" && o.consumers != "priority" {
		return o, fmt.Errorf("--consumers: %q is not type or priority", o.consumers)
	}
	if o.timeout <= 0 {
		return o, fmt.Errorf("--timeout: %s must be positive", o.timeout)
	}
	o.command = fs.Args()
	if !o.list && len(o.command) == 0 {
		return o, errors.New("no command to test: give it after --")
	}
	return o, nil
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	o, err := parseArgs(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintln(stderr, "spool-conformance:", err)
		return 2
	}
	cases, err := selectCases(o.level, o.run, o.skip)
	if err != nil {
		fmt.Fprintln(stderr, "spool-conformance:", err)
		return 2
	}
	if o.list {
		printList(stdout, cases)
		return 0
	}
	k, err := startKit(ctx, o, stderr)
	if err != nil {
		fmt.Fprintln(stderr, "spool-conformance:", err)
		return 2
	}
	rows := make([]Outcome, 0, len(cases))
	for _, c := range cases {
		if ctx.Err() != nil {
			break
		}
		row := runCase(ctx, k, c, o)
		k.logger.Info("case done", "case", c.Name, "verdict", row.Verdict, "why", row.Why)
		rows = append(rows, row)
	}
	if err := k.close(); err != nil {
		fmt.Fprintln(stderr, "spool-conformance:", err)
	}
	if failed := printTable(stdout, rows); failed > 0 || ctx.Err() != nil {
		return 1
	}
	return 0
}
