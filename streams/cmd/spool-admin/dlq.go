package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	spool "github.com/spoolq/spool/shared"
	"github.com/spoolq/spool/shared/cli"
	"github.com/spoolq/spool/streams/admin"
	"github.com/spoolq/spool/streams/dlq"
)

const dlqUsage = `usage: spool-admin dlq <command> [flags]

commands:
  list [filters] [--limit N] [--after SEQ]   dead letters, oldest first, one page
  show SEQ                                   one dead letter with headers and payload
  replay SEQ... | replay [filters]           send back to the original subject, attempts reset
  purge [filters] | purge --all              delete dead letters

filters (combine freely):
  --priority P   critical, high, normal, low, idle
  --type T       exact task type (email.send)
  --reason R     error, permanent, timeout, panic, max_deliver, bad_input, no_handler, unserved
  --since T      stored at or after T: RFC 3339 time, or a duration ago (1h)
  --until T      stored at or before T

flags:
  --limit N      dead letters per page (list; default 100, at most 1000)
  --after SEQ    list after this DLQ sequence: the next page ("more: --after N")
  --all          purge every dead letter
  --json         print JSON
  --url URL      NATS server URL (overrides SPOOL_NATS_URL)
  --timeout D    time allowed for the command (default 30s; 5m for replay and purge)
  -v             also log informational lines (connections) on stderr
`

// dlqFlags are the flags of every dlq command.
type dlqFlags struct {
	fs                                       *flag.FlagSet
	url, priority, typ, reason, since, until *string
	limit                                    *int
	after                                    *uint64
	all, asJSON, verbose                     *bool
	timeout                                  *time.Duration
}

func newDLQFlags(cmd string, stderr io.Writer, timeout time.Duration) *dlqFlags {
	fs := cli.NewFlagSet("spool-admin dlq " + cmd)
	return &dlqFlags{
		verbose:  cli.Verbose(fs),
		fs:       fs,
		url:      fs.String("url", "", "NATS server URL (overrides SPOOL_NATS_URL)"),
		priority: fs.String("priority", "", "only this priority"),
		typ:      fs.String("type", "", "only this task type"),
		reason:   fs.String("reason", "", "only this Spool-Reason"),
		since:    fs.String("since", "", "stored at or after: RFC 3339 time or a duration ago"),
		until:    fs.String("until", "", "stored at or before: RFC 3339 time or a duration ago"),
		limit:    fs.Int("limit", dlq.DefaultLimit, "dead letters per page (list)"),
		after:    fs.Uint64("after", 0, "list after this DLQ sequence (the next page)"),
		all:      fs.Bool("all", false, "purge every dead letter"),
		asJSON:   fs.Bool("json", false, "print JSON"),
		timeout:  fs.Duration("timeout", timeout, "time allowed for the command"),
	}
}

// filter builds the dlq.Filter, naming the flag at fault.
func (f *dlqFlags) filter(now time.Time) (dlq.Filter, error) {
	var flt dlq.Filter
	if *f.priority != "" {
		p, err := spool.ParsePriority(*f.priority)
		if err != nil {
			return flt, fmt.Errorf("--priority: %s", spool.Detail(err))
		}
		flt.Priority = &p
	}
	flt.Type = *f.typ
	flt.Reason = spool.Reason(*f.reason)
	var err error
	if flt.Since, err = parseWhen(*f.since, now); err != nil {
		return flt, fmt.Errorf("--since: %w", err)
	}
	if flt.Until, err = parseWhen(*f.until, now); err != nil {
		return flt, fmt.Errorf("--until: %w", err)
	}
	flt.Limit = *f.limit
	flt.After = *f.after
	if err := flt.Validate(); err != nil {
		return flt, err
	}
	return flt, nil
}

// parseWhen reads an RFC 3339 time or a duration before now.
func parseWhen(s string, now time.Time) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return time.Time{}, fmt.Errorf("%q is neither an RFC 3339 time nor a positive duration", s)
	}
	return now.Add(-d), nil
}

func runDLQ(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, dlqUsage)
		return errors.New("dlq: no command given")
	}
	cmd, args := args[0], args[1:]
	timeout := 30 * time.Second
	switch cmd {
	case "help", "-h", "--help":
		fmt.Fprint(stdout, dlqUsage)
		return nil
	case "list", "show":
	case "replay", "purge":
		timeout = 5 * time.Minute
	default:
		return fmt.Errorf("dlq: unknown command %q (spool-admin dlq help lists the commands)", cmd)
	}
	f := newDLQFlags(cmd, stderr, timeout)
	positional, err := parseInterleaved(f.fs, args)
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprint(stdout, dlqUsage)
	}
	if err != nil {
		return err
	}
	flt, err := f.filter(time.Now())
	if err != nil {
		return err
	}
	var seqs []uint64
	for _, a := range positional {
		seq, err := strconv.ParseUint(a, 10, 64)
		if err != nil || seq == 0 {
			return fmt.Errorf("dlq %s: %q is not a dead-letter sequence", cmd, a)
		}
		seqs = append(seqs, seq)
	}
	switch {
	case (cmd == "list" || cmd == "purge") && len(seqs) > 0:
		return fmt.Errorf("dlq %s takes no arguments, got %q", cmd, positional)
	case cmd == "show" && len(seqs) != 1:
		return errors.New("dlq show takes one sequence")
	case cmd == "replay" && len(seqs) > 0 && flt.Selects():
		return errors.New("dlq replay takes sequences or filters, not both")
	case cmd == "replay" && len(seqs) == 0 && !flt.Selects():
		return errors.New("dlq replay needs sequences or a filter (--priority, --type, --reason, --since, --until)")
	case cmd == "purge" && *f.all && flt.Selects():
		return errors.New("dlq purge: --all and a filter exclude each other")
	case cmd == "purge" && !*f.all && !flt.Selects():
		return fmt.Errorf("dlq purge: %w; --all purges everything", dlq.ErrNoFilter)
	case *f.timeout <= 0:
		return fmt.Errorf("--timeout %s must be positive", *f.timeout)
	}

	ctx, cancel := context.WithTimeout(ctx, *f.timeout)
	defer cancel()
	sess, err := open(ctx, *f.url, *f.verbose, stderr)
	if err != nil {
		return err
	}
	defer sess.nc.Close()
	d := sess.admin
	out := output{w: stdout, json: *f.asJSON}

	switch cmd {
	case "list":
		page, err := d.DeadLetters(ctx, flt)
		if err != nil {
			return err
		}
		return out.page(page)
	case "show":
		l, err := d.DeadLetter(ctx, seqs[0])
		if err != nil {
			return err
		}
		return out.letter(l)
	case "replay":
		if len(seqs) == 0 {
			if seqs, err = matching(ctx, d, flt); err != nil {
				return err
			}
		}
		var done []dlq.Replayed
		for _, seq := range seqs {
			r, err := d.Replay(ctx, seq)
			if err != nil {
				_ = out.replayed(done)
				return err
			}
			done = append(done, r)
		}
		return out.replayed(done)
	default: // purge
		n, err := d.Purge(ctx, flt, *f.all)
		if err != nil {
			return err
		}
		if out.json {
			return out.encode(map[string]uint64{"purged": n})
		}
		_, err = fmt.Fprintf(stdout, "purged %d dead letters\n", n)
		return err
	}
}

// parseInterleaved parses flags placed before, between or after the
// positional arguments, which it returns.
func parseInterleaved(fs *flag.FlagSet, args []string) ([]string, error) {
	var positional []string
	for {
		if err := cli.Parse(fs, args); err != nil {
			return nil, err
		}
		args = fs.Args()
		if len(args) == 0 {
			return positional, nil
		}
		positional = append(positional, args[0])
		args = args[1:]
	}
}

// matching lists the sequences of every dead letter f selects, page by page.
func matching(ctx context.Context, d *admin.Client, f dlq.Filter) ([]uint64, error) {
	f.Limit = dlq.MaxLimit
	var seqs []uint64
	for {
		page, err := d.DeadLetters(ctx, f)
		if err != nil {
			return nil, err
		}
		for _, l := range page.Letters {
			seqs = append(seqs, l.Seq)
		}
		if page.Next == 0 {
			return seqs, nil
		}
		f.After = page.Next
	}
}

type output struct {
	w    io.Writer
	json bool
}

func (o output) encode(v any) error {
	enc := json.NewEncoder(o.w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func (o output) page(p dlq.Page) error {
	if o.json {
		if p.Letters == nil {
			p.Letters = []dlq.Letter{}
		}
		return o.encode(p)
	}
	tw := tabwriter.NewWriter(o.w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SEQ\tSTORED\tPRIORITY\tTYPE\tTASK ID\tREASON\tATTEMPTS\tERROR")
	for _, l := range p.Letters {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%d\t%s\n", l.Seq, l.Time.UTC().Format(time.RFC3339), l.Priority, l.Type,
			l.TaskID, l.Reason, l.Attempts, oneLine(l.Error, 60))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if p.Next != 0 {
		_, err := fmt.Fprintf(o.w, "more: --after %d\n", p.Next)
		return err
	}
	return nil
}

func (o output) letter(l dlq.Letter) error {
	if o.json {
		return o.encode(l)
	}
	fmt.Fprintf(o.w, "seq:       %d\nstored:    %s\nsubject:   %s\ntask id:   %s\nreason:    %s\nattempts:  %d\nerror:     %s\n",
		l.Seq, l.Time.UTC().Format(time.RFC3339Nano), l.Subject, l.TaskID, l.Reason, l.Attempts, l.Error)
	fmt.Fprintf(o.w, "original:  %s (seq %d)\nheaders:\n", l.OriginalSubject, l.OriginalSeq)
	for _, k := range slices.Sorted(maps.Keys(l.Header)) {
		fmt.Fprintf(o.w, "  %s: %s\n", k, strings.Join(l.Header[k], ", "))
	}
	_, err := fmt.Fprintf(o.w, "payload (%d bytes):\n%s\n", l.Size, l.Data)
	return err
}

func (o output) replayed(rs []dlq.Replayed) error {
	if o.json {
		if rs == nil {
			rs = []dlq.Replayed{}
		}
		return o.encode(map[string]any{"replayed": rs})
	}
	for _, r := range rs {
		fmt.Fprintf(o.w, "replayed %d: task %s to %s (stream seq %d, replay %d)\n", r.Seq, r.TaskID, r.Subject, r.StreamSeq, r.Replays)
	}
	_, err := fmt.Fprintf(o.w, "%d replayed\n", len(rs))
	return err
}

func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > n {
		return s[:n-1] + "…"
	}
	return s
}
