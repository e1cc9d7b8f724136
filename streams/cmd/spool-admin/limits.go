package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spoolq/spool/shared/cli"
	"github.com/spoolq/spool/shared/limits"
	"github.com/spoolq/spool/streams"
)

const limitsUsage = `usage: spool-admin limits <command> [flags]

commands:
  ls                    every flow-control rule with its use across the fleet: slots held,
                        busiest keys, whether the rate is at its limit and the tasks waiting
  set --type T [limits] set the rule of a task type or type pattern (replaces it; workers apply it
                        within a second); T may be a pattern: email.* (any one token), email.>
                        (one or more tokens), > (every type)
  set --file F          set the rule in the JSON document F (- for stdin; docs/contract.md),
                        its type from --type or the document's "type"
  rm TYPE|PATTERN       remove the rule stored under a type or pattern: its types fall to the
                        next matching pattern rule, or run unlimited
  explain TYPE [KEY]    which rule governs the type (exact rule, else the most precise pattern)
                        and, with a key, the per-key limits that apply to it
  unblock TYPE KEY      give up every place in the turn of an ordered or fair key and start its
                        next held tasks: for a key whose place holder left the stream without
                        being settled (purged or deleted by hand); tasks of the key already
                        queued or running then run outside the order

limits (set; omitted ones are not limited):
  --concurrency N       at most N tasks of the type running at once
  --rate N/PERIOD       at most N starts of the type per period, evenly spaced (100/1s, 10/1m)
  --burst B             starts allowed at once after an idle spell (default 1)
  --key-concurrency N   at most N running tasks per Spool-Key of the type
  --key-rate N/PERIOD   at most N starts per period per Spool-Key of the type
  --key-burst B         burst of the per-key rate (default 1)
  --ordered MODE        run the tasks of each Spool-Key one at a time in enqueue order;
                        MODE hold: a failing task keeps its key until it completes or dies,
                        skip: a failing task lets the next one run (its retries run unordered)
  --fair                share the workers fairly between the keys of the type: each key has at
                        most its window of tasks queued or running at once
  --fair-window N       tasks per key of weight 1 queued or running at once (default 10)
  --fair-weight P=W     weight W (1-100) of the keys matching P (a key, or a prefix and *);
                        repeat for more patterns
  --key-limit P=LIMITS  other per-key limits for the keys matching P (a key, or a prefix and *;
                        the most precise pattern wins): LIMITS is concurrency=N, rate=N/PERIOD
                        and burst=B, comma-separated (vip-*=concurrency=5,rate=100/1s); a limit
                        left out is no limit for those keys; repeat for more patterns

flags:
  --json                print JSON (ls)
  --url URL             NATS server URL (overrides SPOOL_NATS_URL)
  --timeout D           time allowed for the command (default 30s)
`

func runLimits(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if done, err := familyHelp("limits", limitsUsage, args, stdout); done {
		return err
	}
	cmd, args := args[0], args[1:]
	fs, url, asJSON, timeout, verbose := familyFlags("limits", cmd, limitsUsage, stderr)
	typ := fs.String("type", "", "task type")
	conc := fs.Int("concurrency", 0, "at most N running")
	keyConc := fs.Int("key-concurrency", 0, "at most N running per key")
	rate := fs.String("rate", "", "N/PERIOD starts")
	keyRate := fs.String("key-rate", "", "N/PERIOD starts per key")
	burst := fs.Int("burst", 0, "burst of --rate")
	keyBurst := fs.Int("key-burst", 0, "burst of --key-rate")
	ordered := fs.String("ordered", "", "hold or skip: per-key order")
	fair := fs.Bool("fair", false, "fair shares between keys")
	fairWindow := fs.Int("fair-window", 0, "tasks per key of weight 1 at once")
	var weights weightFlag
	fs.Var(&weights, "fair-weight", "P=W: weight of the keys matching P")
	var keyLimits keyLimitFlag
	fs.Var(&keyLimits, "key-limit", "P=LIMITS: per-key limits of the keys matching P")
	file := fs.String("file", "", "JSON rule document (- for stdin)")
	switch cmd {
	case "ls", "set", "rm", "unblock", "explain":
	default:
		fmt.Fprint(stderr, limitsUsage)
		return fmt.Errorf("unknown limits command %q", cmd)
	}
	// Flags may follow the arguments (limits rm TYPE --url URL).
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return err
		}
		if fs.NArg() == 0 {
			break
		}
		pos, args = append(pos, fs.Arg(0)), fs.Args()[1:]
	}
	if err := fs.Parse(pos); err != nil {
		return err
	}
	if *timeout <= 0 {
		return fmt.Errorf("--timeout %s must be positive", *timeout)
	}
	var rule limits.Rule
	switch cmd {
	case "rm":
		if fs.NArg() != 1 {
			return fmt.Errorf("limits rm takes one task type, got %q", fs.Args())
		}
	case "unblock":
		if fs.NArg() != 2 || fs.Arg(0) == "" || fs.Arg(1) == "" {
			return fmt.Errorf("limits unblock takes a task type and a key, got %q", fs.Args())
		}
	case "explain":
		if fs.NArg() < 1 || fs.NArg() > 2 {
			return fmt.Errorf("limits explain takes a task type and an optional key, got %q", fs.Args())
		}
	case "set":
		if fs.NArg() > 0 {
			return fmt.Errorf("limits set takes no arguments, got %q (use --type)", fs.Args())
		}
		if *file != "" {
			var err error
			if rule, err = ruleFile(fs, *file, *typ); err != nil {
				return err
			}
			break
		}
		if *typ == "" {
			return errors.New("--type is required")
		}
		rule = limits.Rule{Type: *typ, Concurrency: *conc, KeyConcurrency: *keyConc, Ordered: *ordered}
		if len(keyLimits) > 0 {
			rule.Keys = keyLimits
		}
		switch {
		case *fair || *fairWindow != 0 || len(weights) > 0:
			rule.Fair = &limits.Fair{Window: *fairWindow}
			if len(weights) > 0 {
				rule.Fair.Weights = weights
			}
		}
		var err error
		if rule.Rate, err = parseRate("--rate", *rate, *burst); err != nil {
			return err
		}
		if rule.KeyRate, err = parseRate("--key-rate", *keyRate, *keyBurst); err != nil {
			return err
		}
		if err := rule.Validate(); err != nil {
			return err
		}
	default:
		if fs.NArg() > 0 {
			return fmt.Errorf("limits ls takes no arguments, got %q", fs.Args())
		}
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	sess, err := open(ctx, *url, *verbose, stderr)
	if err != nil {
		return err
	}
	defer sess.nc.Close()
	st, err := limits.Open(ctx, sess.js, sess.cfg.Names())
	if err != nil {
		return err
	}
	switch cmd {
	case "rm":
		if err := st.Delete(ctx, fs.Arg(0)); err != nil {
			return err
		}
		capConsumers(ctx, sess, st, stderr)
		fmt.Fprintf(stdout, "rule of %s removed\n", fs.Arg(0))
		return nil
	case "unblock":
		return unblockKey(ctx, sess, st, fs.Arg(0), fs.Arg(1), stdout)
	case "explain":
		return explain(ctx, st, fs.Arg(0), fs.Arg(1), stdout)
	case "set":
		if err := st.Put(ctx, rule); err != nil {
			return err
		}
		capConsumers(ctx, sess, st, stderr)
		fmt.Fprintf(stdout, "rule of %s set: %s\n", rule.Type, describe(rule))
		return nil
	}
	usage, err := st.Usage(ctx)
	if err != nil {
		return err
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(usage)
	}
	return printUsage(stdout, usage)
}

// unblockKey frees every place of the key's turn (limits.Turns.Unblock)
// and releases its next held tasks while its window has room.
func unblockKey(ctx context.Context, sess *session, st *limits.Store, typ, key string, stdout io.Writer) error {
	rule, err := st.Resolve(ctx, typ)
	if err != nil && !errors.Is(err, limits.ErrNoRule) {
		return err
	}
	turns, err := limits.NewTurns(ctx, sess.js, sess.cfg.Names())
	if err != nil {
		return err
	}
	freed, err := turns.Unblock(ctx, typ, key)
	if err != nil {
		return err
	}
	// A rule lifted meanwhile still drains the key, one at a time.
	if err := turns.Kick(ctx, typ, key, max(1, rule.KeyWindow(key))); err != nil {
		return fmt.Errorf("places freed, but starting key %q of %s failed (the next task or kick of the key retries): %w", key, typ, err)
	}
	turn, err := turns.Get(ctx, typ, key)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "key %q of %s: %d place(s) given up (held seq %v); %d task(s) now hold a place\n",
		key, typ, len(freed), freed, len(turn.Running))
	return nil
}

// printUsage prints the rules and their use across the fleet, one line a
// type.
func printUsage(w io.Writer, usage []limits.Usage) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "type\trunning / concurrency\tper-key running / limit\twaiting for a slot\tbusiest keys\trate\trate now\tkey rate\tkey patterns\tordered\tfair")
	for _, u := range usage {
		r := u.Rule
		conc, keys, busy, waiting := "-", "-", "-", "-"
		name := r.Type
		switch {
		case u.Via != "":
			name = fmt.Sprintf("  %s (via %s)", r.Type, u.Via)
		case limits.IsPattern(r.Type):
			name += " (pattern: each type on its own)"
		}
		if r.Concurrency > 0 {
			conc = fmt.Sprintf("%d / %d", u.Running, r.Concurrency)
		}
		if r.KeyConcurrency > 0 {
			keys = fmt.Sprintf("%d in %d keys / %d each", u.KeysRunning, u.KeysActive, r.KeyConcurrency)
		}
		if r.Concurrency > 0 || r.KeyConcurrency > 0 || len(r.Keys) > 0 || u.Waiting > 0 {
			waiting = strconv.Itoa(u.Waiting)
		}
		if len(u.Busiest) > 0 {
			var b []string
			for _, k := range u.Busiest {
				b = append(b, fmt.Sprintf("%q %d", k.Key, k.Running))
			}
			busy = strings.Join(b, ", ")
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", name, conc, keys, waiting, busy, rateText(r.Rate), rateNow(u.Rate), rateText(r.KeyRate), keysText(r.Keys), orderText(r.Ordered), fairText(r.Fair))
	}
	return tw.Flush()
}

// rateNow tells whether a rate limit takes every start it allows now, and
// how many tasks it turned away are booked to come back.
func rateNow(u *limits.RateUsage) string {
	switch {
	case u == nil:
		return "-"
	case u.NextStart > 0 || u.Waiting > 0:
		return fmt.Sprintf("at the limit, %d waiting", u.Waiting)
	default:
		return "below the limit"
	}
}

// parseRate reads N/PERIOD (100/1s, 10/1m); empty is no rate.
func parseRate(flagName, s string, burst int) (*limits.Rate, error) {
	if s == "" {
		if burst != 0 {
			return nil, fmt.Errorf("a burst needs %s", flagName)
		}
		return nil, nil
	}
	n, per, ok := strings.Cut(s, "/")
	limit, err := strconv.Atoi(n)
	if !ok || err != nil {
		return nil, fmt.Errorf("%s %q: want N/PERIOD, such as 100/1s or 10/1m", flagName, s)
	}
	d, err := time.ParseDuration(per)
	if err != nil {
		return nil, fmt.Errorf("%s %q: the period %q is not a Go duration such as 1s or 1m", flagName, s, per)
	}
	return &limits.Rate{Limit: limit, Period: limits.Duration(d), Burst: burst}, nil
}

func orNone(n int) string {
	if n == 0 {
		return "-"
	}
	return strconv.Itoa(n)
}

func rateText(r *limits.Rate) string {
	if r == nil {
		return "-"
	}
	s := fmt.Sprintf("%d/%s", r.Limit, time.Duration(r.Period))
	if r.Burst > 1 {
		s += fmt.Sprintf(" burst %d", r.Burst)
	}
	return s
}

func orderText(mode string) string {
	if mode == "" {
		return "-"
	}
	return mode
}

func describe(r limits.Rule) string {
	return fmt.Sprintf("concurrency %s, rate %s, key concurrency %s, key rate %s, key patterns %s, ordered %s, fair %s",
		orNone(r.Concurrency), rateText(r.Rate), orNone(r.KeyConcurrency), rateText(r.KeyRate), keysText(r.Keys), orderText(r.Ordered), fairText(r.Fair))
}

func fairText(f *limits.Fair) string {
	if f == nil {
		return "-"
	}
	w := f.Window
	if w == 0 {
		w = limits.DefaultFairWindow
	}
	s := fmt.Sprintf("window %d", w)
	pats := make([]string, 0, len(f.Weights))
	for p := range f.Weights {
		pats = append(pats, p)
	}
	sort.Strings(pats)
	for _, p := range pats {
		s += fmt.Sprintf(" %s=%d", p, f.Weights[p])
	}
	return s
}

// weightFlag collects --fair-weight P=W.
type weightFlag map[string]int

func (w *weightFlag) String() string { return fmt.Sprint(map[string]int(*w)) }

func (w *weightFlag) Set(v string) error {
	p, n, ok := strings.Cut(v, "=")
	weight, err := strconv.Atoi(n)
	if !ok || p == "" || err != nil {
		return fmt.Errorf("--fair-weight %q: want PATTERN=WEIGHT, such as vip-*=4", v)
	}
	if *w == nil {
		*w = weightFlag{}
	}
	(*w)[p] = weight
	return nil
}

// familyHelp answers a command family's help (spool-admin limits,
// schedule, workflows): with no command, or help, -h or --help, it prints
// the family's usage and reports done; no command at all is an error.
func familyHelp(family, usage string, args []string, stdout io.Writer) (done bool, err error) {
	if len(args) > 0 && args[0] != "help" && args[0] != "-h" && args[0] != "--help" {
		return false, nil
	}
	fmt.Fprint(stdout, usage)
	if len(args) == 0 {
		return true, errors.New(family + ": no command given")
	}
	return true, nil
}

// familyFlags is the flag set of a command of a family (spool-admin
// limits, workflows) with the flags every such command has: --url,
// --json, --timeout and -v.
func familyFlags(family, cmd, usage string, stderr io.Writer) (fs *flag.FlagSet, url *string, asJSON *bool, timeout *time.Duration, verbose *bool) {
	fs = flag.NewFlagSet("spool-admin "+family+" "+cmd, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, usage) }
	url = fs.String("url", "", "NATS server URL (overrides SPOOL_NATS_URL)")
	asJSON = fs.Bool("json", false, "print JSON")
	timeout = fs.Duration("timeout", 30*time.Second, "time allowed for the command")
	return fs, url, asJSON, timeout, cli.Verbose(fs)
}

// capConsumers sets, where workers pull by type, the MaxAckPending of the
// type consumers to the concurrency limits now stored. A failure is a
// warning: the rule is stored, and the workers set the caps of the
// consumers they pull as they see the change.
func capConsumers(ctx context.Context, sess *session, st *limits.Store, stderr io.Writer) {
	if err := streams.CapConsumersFromStore(ctx, sess.js, sess.cfg.Names(), st); err != nil {
		fmt.Fprintf(stderr, "warning: the rule is stored, but setting the type consumers' concurrency caps failed (the workers set them): %v\n", err)
	}
}
