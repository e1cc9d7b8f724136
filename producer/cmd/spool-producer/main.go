// Command spool-producer enqueues Spool tasks, reads their results, cancels
// scheduled ones, generates load and runs the HTTP broker.
//
//	spool-producer enqueue --type email.send --payload '{"to":"a@example.com"}' [flags]
//	spool-producer result <id> [--wait]
//	spool-producer cancel [-by who] [-reason why] <id>
//	spool-producer load --count 100000 --mix critical=1,high=2,normal=4 [flags]
//	spool-producer serve
//
// Configuration comes from SPOOL_ environment variables (spool-producer help
// lists them with their defaults); --url overrides SPOOL_NATS_URL and, for
// serve, --addr overrides SPOOL_HTTP_ADDR.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	_ "time/tzdata" // schedules' time zones resolve without the system tz database

	"github.com/spoolq/spool/shared/cli"
	"github.com/spoolq/spool/shared/config"
)

// Config is spool-producer's configuration, loaded once in main.
type Config struct {
	config.Common
	// HTTPAddr is where serve listens, host:port. SPOOL_HTTP_ADDR, default
	// 127.0.0.1:8080 (loopback only).
	HTTPAddr string `envconfig:"HTTP_ADDR" default:"127.0.0.1:8080" desc:"serve: listen address host:port (off: no broker; only serve refuses it)"`
	// HTTPToken, when set, is the bearer token serve requires on every API
	// route (at least 16 characters). SPOOL_HTTP_TOKEN, default none.
	HTTPToken string `envconfig:"HTTP_TOKEN" desc:"serve: bearer token required on API routes (16+ characters); empty: no auth"`
	// HTTPMaxBody is serve's request body limit in bytes. SPOOL_HTTP_MAX_BODY,
	// default 2097152 (2 MiB).
	HTTPMaxBody int64 `envconfig:"HTTP_MAX_BODY" default:"2097152" desc:"serve: request body limit in bytes"`
}

// minTokenLen is the shortest SPOOL_HTTP_TOKEN accepted.
const minTokenLen = 16

// httpOff is the SPOOL_HTTP_ADDR value that leaves the broker out, as for
// spool-dev. Only serve refuses it: the other commands never listen.
const httpOff = "off"

// Validate checks the settings every command uses and names the variable at
// fault. The broker's settings are checked by serve alone, so one
// environment shared by a whole stack, SPOOL_HTTP_ADDR=off included, serves
// enqueue, result, cancel and load.
func (c Config) Validate() error {
	return c.Common.Validate()
}

// validateServe checks the broker's settings and names the variable at fault.
func (c Config) validateServe() error {
	if c.HTTPAddr == httpOff {
		return fmt.Errorf("SPOOL_HTTP_ADDR is %q, which leaves the broker out: serve needs a listen address host:port (set it, or pass --addr)", httpOff)
	}
	if err := validateAddr(c.HTTPAddr); err != nil {
		return fmt.Errorf("SPOOL_HTTP_ADDR: %w", err)
	}
	if c.HTTPToken != "" && len(c.HTTPToken) < minTokenLen {
		return fmt.Errorf("SPOOL_HTTP_TOKEN: %d characters, at least %d", len(c.HTTPToken), minTokenLen)
	}
	if c.HTTPMaxBody < 1024 || c.HTTPMaxBody > 64<<20 {
		return fmt.Errorf("SPOOL_HTTP_MAX_BODY: %d must be 1024 to %d bytes", c.HTTPMaxBody, 64<<20)
	}
	return nil
}

func validateAddr(addr string) error {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%q is not host:port (e.g. 127.0.0.1:8080): %w", addr, err)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		return fmt.Errorf("%q: port %q must be 0 to 65535", addr, port)
	}
	return nil
}

const usage = `usage: spool-producer <command> [flags] [args]

commands:
  enqueue        enqueue one task
  result <id>    print a task's result document; --wait waits until it is completed,
                 dead or cancelled, for at most --timeout (default 1m; 0 waits until interrupted)
  cancel <id>    cancel a task: delayed, queued or running (--by, --reason)
  load           generate load: --count or --duration, --rate, --mix, --type, --size
  serve          run the HTTP broker on SPOOL_HTTP_ADDR
  help           show this text and the environment variables

spool-producer <command> --help lists the command's flags. Every command takes:
  --url URL      NATS server URL (overrides SPOOL_NATS_URL)
  -v             also log informational lines (connections) on stderr; without it a
                 command prints its answer and only warnings and errors besides
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(cli.Exit(os.Stderr, "spool-producer", err))
}

// commands maps each subcommand to its implementation.
var commands = map[string]func(ctx context.Context, cfg Config, env *cmdEnv, args []string) error{
	"enqueue": runEnqueue,
	"result":  runResult,
	"cancel":  runCancel,
	"load":    runLoad,
	"serve":   runServe,
}

// cmdEnv is what a subcommand reads and writes.
type cmdEnv struct {
	stdin          io.Reader
	stdout, stderr io.Writer
}

func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return errors.New("no command given")
	}
	cmd, args := args[0], args[1:]
	switch cmd {
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		fmt.Fprintf(stdout, "\nenvironment:\n%s", config.Usage(&Config{}))
		fmt.Fprint(stdout, "\ntracing of serve (OpenTelemetry, off unless an exporter or endpoint is set):\n"+
			"  OTEL_TRACES_EXPORTER, OTEL_EXPORTER_OTLP_ENDPOINT, OTEL_EXPORTER_OTLP_PROTOCOL,\n"+
			"  OTEL_SERVICE_NAME, OTEL_TRACES_SAMPLER, OTEL_SDK_DISABLED\n")
		return nil
	}
	f, ok := commands[cmd]
	if !ok {
		return fmt.Errorf("unknown command %q (spool-producer help lists the commands)", cmd)
	}
	var cfg Config
	if err := config.Load(&cfg); err != nil {
		return err
	}
	return f(ctx, cfg, &cmdEnv{stdin: stdin, stdout: stdout, stderr: stderr}, args)
}
