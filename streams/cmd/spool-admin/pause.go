package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"time"

	spool "github.com/spoolq/spool/shared"
	"github.com/spoolq/spool/shared/cli"
	"github.com/spoolq/spool/streams/admin"
)

// runPause runs `pause <priority> [--for D | --until T]` and
// `resume <priority>`.
func runPause(ctx context.Context, cmd string, args []string, stdout, stderr io.Writer) error {
	fs := cli.NewFlagSet("spool-admin " + cmd)
	verbose := cli.Verbose(fs)
	url := fs.String("url", "", "NATS server URL (overrides SPOOL_NATS_URL)")
	timeout := fs.Duration("timeout", 30*time.Second, "time allowed for the command")
	var forD *time.Duration
	var until *string
	if cmd == "pause" {
		forD = fs.Duration("for", 0, "pause for this long (default: until resumed)")
		until = fs.String("until", "", "pause until this RFC 3339 time (default: until resumed)")
	}
	pos, err := parseInterleaved(fs, args)
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprint(stdout, usage)
	}
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return fmt.Errorf("%s takes one priority (critical, high, normal, low, idle), got %d arguments", cmd, len(pos))
	}
	p, err := spool.ParsePriority(pos[0])
	if err != nil {
		return fmt.Errorf("%s: %w", cmd, err)
	}
	var end time.Time
	if cmd == "pause" {
		switch {
		case *forD != 0 && *until != "":
			return errors.New("--for and --until: give one of them")
		case *forD < 0:
			return fmt.Errorf("--for %s must be positive", *forD)
		case *forD > 0:
			end = time.Now().Add(*forD)
		case *until != "":
			if end, err = time.Parse(time.RFC3339, *until); err != nil {
				return fmt.Errorf("--until %q: want an RFC 3339 time such as 2026-11-25T18:00:00Z", *until)
			}
		}
	}
	ctx, sess, done, err := openFor(ctx, *url, *verbose, *timeout, stderr)
	if err != nil {
		return err
	}
	defer done()
	if cmd == "resume" {
		if err := sess.admin.ResumePriority(ctx, p); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "resumed %s\n", p)
		return nil
	}
	got, err := sess.admin.PausePriority(ctx, p, end)
	if err != nil {
		return err
	}
	if got.Equal(admin.Forever) {
		fmt.Fprintf(stdout, "paused %s until resumed\n", p)
	} else {
		fmt.Fprintf(stdout, "paused %s until %s\n", p, got.UTC().Format(time.RFC3339))
	}
	return nil
}
