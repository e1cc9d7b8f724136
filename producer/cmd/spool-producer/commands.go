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
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/spoolq/spool/producer"
	spool "github.com/spoolq/spool/shared"
	"github.com/spoolq/spool/shared/logging"
	"github.com/spoolq/spool/shared/natsconn"
)

// connectTimeout bounds the first connection to NATS.
const connectTimeout = 10 * time.Second

// newFlagSet returns a flag set with the common --url flag.
func newFlagSet(name string, env *cmdEnv) (*flag.FlagSet, *string) {
	fs := flag.NewFlagSet("spool-producer "+name, flag.ContinueOnError)
	fs.SetOutput(env.stderr)
	url := fs.String("url", "", "NATS server URL (overrides SPOOL_NATS_URL)")
	return fs, url
}

// parse parses args, allowing positional arguments before, between and
// after flags, and returns the positional ones.
func parse(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		if fs.NArg() == 0 {
			return pos, nil
		}
		pos = append(pos, fs.Arg(0))
		args = fs.Args()[1:]
	}
}

// session is a connected client for one command.
type session struct {
	nc     *nats.Conn
	client *producer.Client
	logger *slog.Logger
}

func (s *session) close() {
	s.client.Close()
	s.nc.Close()
}

// connect applies the --url override, builds the logger and connects.
func connect(ctx context.Context, cfg Config, url string, env *cmdEnv, opts ...producer.Option) (*session, error) {
	if url != "" {
		cfg.URL = url
		if err := cfg.Validate(); err != nil {
			return nil, fmt.Errorf("--url: %w", err)
		}
	}
	logger, err := logging.New(env.stderr, cfg.LogFormat, cfg.LogLevel)
	if err != nil {
		return nil, err
	}
	cctx, cancel := context.WithTimeout(ctx, connectTimeout)
	defer cancel()
	nc, err := natsconn.Connect(cctx, cfg.NATS, "spool-producer", logger)
	if err != nil {
		return nil, err
	}
	client, err := producer.New(nc, append([]producer.Option{producer.WithNames(cfg.Names()), producer.WithLogger(logger)}, opts...)...)
	if err != nil {
		nc.Close()
		return nil, err
	}
	return &session{nc: nc, client: client, logger: logger}, nil
}

// headerFlags collects repeated --header Name=Value flags.
type headerFlags map[string]string

func (h headerFlags) String() string { return fmt.Sprint(map[string]string(h)) }

func (h headerFlags) Set(s string) error {
	k, v, ok := strings.Cut(s, "=")
	if !ok || k == "" {
		return fmt.Errorf("%q is not Name=Value", s)
	}
	h[k] = v
	return nil
}

// priorityFlag parses a priority name.
type priorityFlag struct{ p spool.Priority }

func (f *priorityFlag) String() string { return f.p.String() }
func (f *priorityFlag) Set(s string) error {
	p, err := spool.ParsePriority(s)
	if err != nil {
		return err
	}
	f.p = p
	return nil
}

// durationFlag parses a task field's duration with the library's rule.
type durationFlag struct {
	field string
	d     time.Duration
}

func (f *durationFlag) String() string { return f.d.String() }
func (f *durationFlag) Set(s string) error {
	d, err := spool.ParseDuration(f.field, s)
	if err != nil {
		return err
	}
	f.d = d
	return nil
}

func runEnqueue(ctx context.Context, cfg Config, env *cmdEnv, args []string) error {
	fs, url := newFlagSet("enqueue", env)
	pri := &priorityFlag{p: spool.Normal}
	headers := headerFlags{}
	var (
		typ         = fs.String("type", "", "task type, e.g. email.send (required)")
		payload     = fs.String("payload", "", "payload, as given")
		payloadFile = fs.String("payload-file", "", `read the payload from this file; "-" reads stdin`)
		id          = fs.String("id", "", "task id (default: a new time-ordered id)")
		maxRetries  = fs.Int("max-retries", -1, "retries after the first attempt (default: the consumer's, 3)")
		uniqueKey   = fs.String("unique-key", "", "refuse the task while another with this key lives")
		processAt   = fs.String("process-at", "", "run at this RFC 3339 time")
		traceparent = fs.String("traceparent", "", "W3C traceparent")
		tracestate  = fs.String("tracestate", "", "W3C tracestate")
		asJSON      = fs.Bool("json", false, "print the result as JSON")
	)
	timeout := &durationFlag{field: "timeout"}
	uniqueTTL := &durationFlag{field: "unique_ttl"}
	delay := &durationFlag{field: "delay"}
	fs.Var(pri, "priority", "critical, high, normal, low or idle")
	fs.Var(timeout, "timeout", "per-attempt handler deadline, e.g. 30s (default: the consumer's)")
	fs.Var(uniqueTTL, "unique-ttl", "how long the unique key lives, at least 1s (required with --unique-key)")
	fs.Var(delay, "delay", "run after this delay, e.g. 10m")
	fs.Var(headers, "header", "extra header Name=Value (repeatable)")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return fmt.Errorf("enqueue takes no arguments, got %q (use --payload or --payload-file)", pos)
	}
	if *typ == "" {
		return errors.New("--type is required")
	}
	task := producer.Task{
		Type: *typ, Priority: &pri.p, ID: *id, Timeout: timeout.d,
		UniqueKey: *uniqueKey, UniqueTTL: uniqueTTL.d, Delay: delay.d,
		TraceParent: *traceparent, TraceState: *tracestate,
	}
	if len(headers) > 0 {
		task.Headers = headers
	}
	if *maxRetries != -1 {
		task.MaxRetries = maxRetries
	}
	if task.ProcessAt, err = spool.ParseProcessAt(*processAt); err != nil {
		return flagError(err)
	}
	switch {
	case *payload != "" && *payloadFile != "":
		return errors.New("--payload and --payload-file: set at most one")
	case *payloadFile == "-":
		if task.Payload, err = io.ReadAll(env.stdin); err != nil {
			return fmt.Errorf("reading the payload from stdin: %w", err)
		}
	case *payloadFile != "":
		if task.Payload, err = os.ReadFile(*payloadFile); err != nil {
			return fmt.Errorf("--payload-file: %w", err)
		}
	case *payload != "":
		task.Payload = []byte(*payload)
	}
	s, err := connect(ctx, cfg, *url, env)
	if err != nil {
		return err
	}
	defer s.close()
	res, err := s.client.Enqueue(ctx, task)
	if err != nil {
		return flagError(err)
	}
	if *asJSON {
		return printJSON(env.stdout, res)
	}
	switch {
	case res.Duplicate:
		fmt.Fprintf(env.stdout, "duplicate %s (already stored as seq %d)\n", res.ID, res.Sequence)
	case res.Scheduled:
		fmt.Fprintf(env.stdout, "scheduled %s for %s (seq %d)\n", res.ID, res.ProcessAt.Format(time.RFC3339Nano), res.Sequence)
	default:
		fmt.Fprintf(env.stdout, "enqueued %s on %s (seq %d)\n", res.ID, res.Subject, res.Sequence)
	}
	return nil
}

// flagError names the flag behind a task validation error: the flag of
// the field spool.FieldError names.
func flagError(err error) error {
	var inv *spool.FieldError
	if errors.As(err, &inv) {
		name := strings.ReplaceAll(inv.Field, "_", "-")
		if inv.Field == "headers" {
			name = "header"
		}
		return fmt.Errorf("--%s: %w", name, inv.Err)
	}
	return err
}

func runResult(ctx context.Context, cfg Config, env *cmdEnv, args []string) error {
	fs, url := newFlagSet("result", env)
	wait := fs.Bool("wait", false, "wait until the task is completed or dead")
	timeout := fs.Duration("timeout", 0, "give up waiting after this long (default: wait until interrupted)")
	output := fs.Bool("output", false, "print the handler's output byte for byte instead of the result document")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return fmt.Errorf("result takes one task id, got %d arguments", len(pos))
	}
	if *timeout < 0 {
		return fmt.Errorf("--timeout %s must not be negative", *timeout)
	}
	s, err := connect(ctx, cfg, *url, env)
	if err != nil {
		return err
	}
	defer s.close()
	if *timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, *timeout)
		defer cancel()
	}
	var res spool.Result
	if *wait {
		res, err = s.client.Wait(ctx, pos[0])
	} else {
		res, err = s.client.Result(ctx, pos[0])
	}
	if err != nil {
		return err
	}
	if !*output {
		return printJSON(env.stdout, res)
	}
	out, err := res.Output()
	if err != nil {
		return err
	}
	if _, err := env.stdout.Write(out); err != nil {
		return fmt.Errorf("writing the output of task %q: %w", pos[0], err)
	}
	return nil
}

func runCancel(ctx context.Context, cfg Config, env *cmdEnv, args []string) error {
	fs, url := newFlagSet("cancel", env)
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return fmt.Errorf("cancel takes one task id, got %d arguments", len(pos))
	}
	s, err := connect(ctx, cfg, *url, env)
	if err != nil {
		return err
	}
	defer s.close()
	ok, err := s.client.Cancel(ctx, pos[0])
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("task %q has no pending schedule (never scheduled, already fired or cancelled)", pos[0])
	}
	fmt.Fprintf(env.stdout, "cancelled %s\n", pos[0])
	return nil
}

func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
