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
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/spoolq/spool/producer"
	spool "github.com/spoolq/spool/shared"
	"github.com/spoolq/spool/shared/cli"
	"github.com/spoolq/spool/shared/config"
	"github.com/spoolq/spool/shared/logging"
	"github.com/spoolq/spool/shared/natsconn"
	"github.com/spoolq/spool/streams/admin"
)

// connectTimeout bounds the first connection to NATS.
const connectTimeout = 10 * time.Second

// defaultWaitTimeout is how long result --wait waits unless --timeout says
// otherwise.
const defaultWaitTimeout = time.Minute

// cmdFlags is a subcommand's flag set with the flags every subcommand has.
type cmdFlags struct {
	*flag.FlagSet
	url      *string
	verbose  *bool
	synopsis string
	env      *cmdEnv
}

// newFlags returns a flag set with --url and -v; synopsis is the first
// lines of the subcommand's --help.
func newFlags(name, synopsis string, env *cmdEnv) *cmdFlags {
	fs := cli.NewFlagSet("spool-producer " + name)
	return &cmdFlags{
		FlagSet:  fs,
		url:      fs.String("url", "", "NATS server URL (overrides SPOOL_NATS_URL)"),
		verbose:  cli.Verbose(fs),
		synopsis: synopsis,
		env:      env,
	}
}

// parse parses args, allowing positional arguments before, between and
// after flags, and returns the positional ones. On -h or --help it prints
// the subcommand's usage on stdout and returns flag.ErrHelp.
func (f *cmdFlags) parse(args []string) ([]string, error) {
	var pos []string
	for {
		if err := cli.Parse(f.FlagSet, args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				fmt.Fprintf(f.env.stdout, "usage: %s\n\nflags:\n", f.synopsis)
				cli.PrintFlags(f.env.stdout, f.FlagSet)
			}
			return nil, err
		}
		if f.NArg() == 0 {
			return pos, nil
		}
		pos = append(pos, f.Arg(0))
		args = f.Args()[1:]
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

// connect applies the --url override, builds the logger and connects. A
// one-shot command logs only warnings unless -v; serve (quiet false) logs
// at SPOOL_LOG_LEVEL.
func connect(ctx context.Context, cfg Config, f *cmdFlags, quiet bool, opts ...producer.Option) (*session, error) {
	if *f.url != "" {
		cfg.URL = *f.url
		if err := cfg.Validate(); err != nil {
			return nil, fmt.Errorf("--url: %s", strings.TrimPrefix(err.Error(), "SPOOL_NATS_URL: "))
		}
	}
	level := cfg.LogLevel
	if quiet {
		level = cli.LogLevel(cfg.LogLevel, *f.verbose)
	}
	logger, err := logging.New(f.env.stderr, cfg.LogFormat, level)
	if err != nil {
		return nil, err
	}
	for _, w := range config.Warnings(os.Environ()) {
		logger.Warn(w)
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

func (h headerFlags) String() string {
	if len(h) == 0 {
		return ""
	}
	return fmt.Sprint(map[string]string(h))
}

func (h headerFlags) Set(s string) error {
	k, v, ok := strings.Cut(s, "=")
	if !ok || k == "" {
		return fmt.Errorf("%q is not Name=Value", s)
	}
	h[k] = v
	return nil
}

// optionalInt is an int flag that may be left unset (no default shown).
type optionalInt struct {
	n   int
	set bool
}

func (f *optionalInt) String() string {
	if f == nil || !f.set {
		return ""
	}
	return strconv.Itoa(f.n)
}

func (f *optionalInt) Set(s string) error {
	n, err := strconv.Atoi(s)
	if err != nil {
		return fmt.Errorf("%q is not a whole number", s)
	}
	f.n, f.set = n, true
	return nil
}

// priorityFlag parses a priority name.
type priorityFlag struct{ p spool.Priority }

func (f *priorityFlag) String() string { return f.p.String() }
func (f *priorityFlag) Set(s string) error {
	p, err := spool.ParsePriority(s)
	if err != nil {
		return fmt.Errorf("%q is not one of critical, high, normal, low, idle", s)
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
		var fe *spool.FieldError
		if errors.As(err, &fe) {
			return errors.New(fe.Reason())
		}
		return err
	}
	f.d = d
	return nil
}

func runEnqueue(ctx context.Context, cfg Config, env *cmdEnv, args []string) error {
	fs := newFlags("enqueue", "spool-producer enqueue --type TYPE [--priority P] [--payload JSON | --payload-text TEXT | --payload-file FILE] [flags]", env)
	pri := &priorityFlag{p: spool.Normal}
	headers := headerFlags{}
	var (
		typ         = fs.String("type", "", "the task `type`, e.g. email.send (required)")
		payload     = fs.String("payload", "", "the payload, one `JSON` value (RFC 8259), checked as the HTTP broker checks it")
		payloadText = fs.String("payload-text", "", "the payload, this `text` as given, not checked as JSON")
		payloadFile = fs.String("payload-file", "", "the payload, this `file`'s bytes as they are; - reads stdin")
		id          = fs.String("id", "", "the task `id`, 1 to 128 of A-Z a-z 0-9 _ - = (default: a new time-ordered id)")
		maxRetries  = &optionalInt{}
		uniqueKey   = fs.String("unique-key", "", "refuse the task while another task with this `key` lives")
		flowKey     = fs.String("key", "", "flow-control `key` (e.g. a customer id) that per-key limits count the task under")
		resultPol   = fs.String("result-policy", "", "`discard`: keep no result document when the task completes; keep: keep it where the worker discards the type's results (default: the worker's rule)")
		processAt   = fs.String("process-at", "", "run at this RFC 3339 `time`, e.g. 2026-01-02T15:04:05Z")
		traceparent = fs.String("traceparent", "", "W3C traceparent")
		tracestate  = fs.String("tracestate", "", "W3C tracestate")
		asJSON      = fs.Bool("json", false, "print the result as JSON")
	)
	timeout := &durationFlag{field: "timeout"}
	uniqueTTL := &durationFlag{field: "unique_ttl"}
	delay := &durationFlag{field: "delay"}
	fs.Var(maxRetries, "max-retries", "retries after the first attempt, a `number` from 0 to 1000 (default: the consumer's SPOOL_DEFAULT_MAX_RETRIES, 3)")
	fs.Var(pri, "priority", "the `priority`: critical, high, normal, low or idle (default normal)")
	fs.Var(timeout, "timeout", "per-attempt handler deadline, a `duration` such as 30s (default: the consumer's SPOOL_TASK_TIMEOUT, 30m)")
	fs.Var(uniqueTTL, "unique-ttl", "how long the unique key lives, a `duration` of at least 1s (required with --unique-key)")
	fs.Var(delay, "delay", "run after this `duration`, e.g. 10m")
	fs.Var(headers, "header", "an extra header `Name=Value` (repeatable)")
	pos, err := fs.parse(args)
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
		UniqueKey: *uniqueKey, UniqueTTL: uniqueTTL.d, Key: *flowKey, Delay: delay.d,
		ResultPolicy: spool.ResultPolicy(*resultPol),
		TraceParent:  *traceparent, TraceState: *tracestate,
	}
	if len(headers) > 0 {
		task.Headers = headers
	}
	if maxRetries.set {
		task.MaxRetries = &maxRetries.n
	}
	if task.ProcessAt, err = spool.ParseProcessAt(*processAt); err != nil {
		return flagError(err)
	}
	if n := countSet(*payload, *payloadText, *payloadFile); n > 1 {
		return errors.New("--payload, --payload-text and --payload-file: set at most one")
	}
	switch {
	case *payloadFile == "-":
		if task.Payload, err = io.ReadAll(env.stdin); err != nil {
			return fmt.Errorf("reading the payload from stdin: %w", err)
		}
	case *payloadFile != "":
		if task.Payload, err = os.ReadFile(*payloadFile); err != nil {
			return fmt.Errorf("--payload-file: %w", err)
		}
	case *payload != "":
		if task.Payload, err = payloadJSON(*payload); err != nil {
			return err
		}
	case *payloadText != "":
		task.Payload = []byte(*payloadText)
	}
	s, err := connect(ctx, cfg, fs, true)
	if err != nil {
		return err
	}
	defer s.close()
	res, err := s.client.Enqueue(ctx, task)
	if err != nil {
		return flagError(err)
	}
	// The task is stored: a type no worker serves is a warning, not an
	// error.
	if res.Warning != "" {
		fmt.Fprintf(env.stderr, "warning: %s\n", res.Warning)
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

// payloadJSON checks --payload as the broker checks a request's payload
// and returns the JSON value without the whitespace around it, so every
// reader stores and shows it as JSON. The error says what is wrong and
// names the flags for input that is not JSON.
func payloadJSON(s string) ([]byte, error) {
	raw, err := spool.CheckJSON("the payload", []byte(s))
	if err != nil {
		return nil, fmt.Errorf("--payload: %w (--payload takes JSON; --payload-text sends text as given, --payload-file a file's bytes)", err)
	}
	return raw, nil
}

// countSet counts the non-empty values.
func countSet(values ...string) int {
	n := 0
	for _, v := range values {
		if v != "" {
			n++
		}
	}
	return n
}

// flagError names the flag behind a task validation error: the flag of
// the field spool.FieldError names.
func flagError(err error) error {
	var inv *spool.FieldError
	if errors.As(err, &inv) {
		return fmt.Errorf("--%s: %s", flagOf(inv.Field), fieldsAsFlags.Replace(inv.Reason()))
	}
	return err
}

// flagOf is the enqueue flag of a task field.
func flagOf(field string) string {
	if field == "headers" {
		return "header"
	}
	return strings.ReplaceAll(field, "_", "-")
}

// fieldsAsFlags rewrites the task fields a reason mentions as flags.
var fieldsAsFlags = strings.NewReplacer("unique_ttl", "--unique-ttl", "unique_key", "--unique-key",
	"max_retries", "--max-retries", "process_at", "--process-at")

func runResult(ctx context.Context, cfg Config, env *cmdEnv, args []string) error {
	fs := newFlags("result", "spool-producer result ID [--wait [--timeout D]] [--output]", env)
	wait := fs.Bool("wait", false, "wait until the task is completed, dead or cancelled")
	timeout := fs.Duration("timeout", defaultWaitTimeout, "with --wait: give up after this long, saying whether the id is known (0: wait until interrupted)")
	output := fs.Bool("output", false, "print the handler's output byte for byte instead of the result document")
	pos, err := fs.parse(args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return fmt.Errorf("result takes one task id, got %d arguments", len(pos))
	}
	if *timeout < 0 {
		return fmt.Errorf("--timeout: %s is negative (0 waits until interrupted)", *timeout)
	}
	id := pos[0]
	if err := checkID(id); err != nil {
		return err
	}
	s, err := connect(ctx, cfg, fs, true)
	if err != nil {
		return err
	}
	defer s.close()
	var res spool.Result
	if *wait {
		wctx := ctx
		if *timeout > 0 {
			var cancel context.CancelFunc
			wctx, cancel = context.WithTimeout(ctx, *timeout)
			defer cancel()
		}
		res, err = s.client.Wait(wctx, id)
		if err != nil && ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded) {
			return s.waitExpired(ctx, cfg, id, *timeout)
		}
	} else {
		res, err = s.client.Result(ctx, id)
		if errors.Is(err, producer.ErrTaskNotFound) {
			return s.noResult(ctx, cfg, id, "")
		}
	}
	if err != nil {
		return flagError(err)
	}
	if !*output {
		return printJSON(env.stdout, res)
	}
	out, err := res.Output()
	if err != nil {
		return err
	}
	if _, err := env.stdout.Write(out); err != nil {
		return fmt.Errorf("writing the output of task %q: %w", id, err)
	}
	return nil
}

// checkID checks a task id given as an argument.
func checkID(id string) error {
	if err := spool.ValidateID(id); err != nil {
		return fmt.Errorf("task id: %s", strings.TrimPrefix(err.Error(), spool.ErrInvalidID.Error()+": "))
	}
	return nil
}

// waitExpired says, once --timeout ran out, where the task stands or
// whether the id is known at all.
func (s *session) waitExpired(ctx context.Context, cfg Config, id string, waited time.Duration) error {
	res, err := s.client.Result(ctx, id)
	switch {
	case errors.Is(err, producer.ErrTaskNotFound):
		return s.noResult(ctx, cfg, id, fmt.Sprintf(" after waiting %s", waited))
	case err != nil:
		return fmt.Errorf("task %q did not finish within %s (--timeout), and reading its state failed: %w", id, waited, err)
	}
	return fmt.Errorf("task %q is still %s after waiting %s (--timeout sets how long; 0 waits until interrupted)", id, res.State, waited)
}

// noResult explains an id with no result document and no pending
// schedule. A queued task gets its first document when a worker picks it
// up, so the id is unknown for certain only when no task waits or runs.
func (s *session) noResult(ctx context.Context, cfg Config, id, after string) error {
	adm, err := admin.New(s.nc, admin.WithNames(cfg.Names()), admin.WithLogger(s.logger))
	if err != nil {
		return err
	}
	st, err := adm.Status(ctx)
	if err != nil {
		return fmt.Errorf("task %q has no result document%s, and reading the queue failed: %w", id, after, err)
	}
	var queued uint64
	for _, p := range st.Priorities {
		queued += p.Pending + uint64(p.InFlight)
	}
	// Where workers pull by type, a task of a type no consumer delivers
	// is queued without counting as any consumer's pending.
	for _, u := range st.Unserved {
		queued += u.Queued
	}
	// A task also waits without a document beside the task subjects:
	// parked while its type is paused, held for its key's turn, in a
	// concurrency limit's waiting room (streams.Places).
	waiting := st.Parked + st.Held + st.WaitingRoom
	if queued+waiting == 0 {
		return fmt.Errorf("task %q is not known: no result document, no pending schedule and no task queued%s (check the id; a result expires after SPOOL_RESULT_TTL)", id, after)
	}
	what := fmt.Sprintf("%d queued tasks", queued)
	if waiting > 0 {
		what = fmt.Sprintf("%d tasks queued or waiting (%d parked, %d held for a key's turn, %d in waiting rooms)", queued+waiting, st.Parked, st.Held, st.WaitingRoom)
	}
	return fmt.Errorf("task %q has no result document%s: it is not known, or it is one of the %s no worker has picked up yet (spool-admin status shows the queue)", id, after, what)
}

func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
