package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os/user"
	"time"

	spool "github.com/spoolq/spool/shared"
	"github.com/spoolq/spool/shared/cli"
	"github.com/spoolq/spool/streams/admin"
)

// runPause runs `pause <priority> [--for D | --until T]`,
// `resume <priority>`, and their type forms `pause type <type> [--for D |
// --until T] [--reason R] [--by B]` and `resume type <type>`.
func runPause(ctx context.Context, cmd string, args []string, stdout, stderr io.Writer) error {
	fs := cli.NewFlagSet("spool-admin " + cmd)
	verbose := cli.Verbose(fs)
	url := fs.String("url", "", "NATS server URL (overrides SPOOL_NATS_URL)")
	timeout := fs.Duration("timeout", 30*time.Second, "time allowed for the command")
	var forD *time.Duration
	var until, reason, by *string
	if cmd == "pause" {
		forD = fs.Duration("for", 0, "pause for this long (default: until resumed)")
		until = fs.String("until", "", "pause until this RFC 3339 time (default: until resumed)")
		reason = fs.String("reason", "", "why (a type pause keeps it; shown by status)")
		by = fs.String("by", "", "who pauses (a type pause keeps it; default: the user name)")
	}
	pos, err := parseInterleaved(fs, args)
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprint(stdout, usage)
	}
	if err != nil {
		return err
	}
	typ := ""
	if len(pos) == 2 && pos[0] == "type" {
		typ = pos[1]
		if err := spool.ValidateType(typ); err != nil {
			return fmt.Errorf("%s type: %w", cmd, err)
		}
	} else if len(pos) != 1 {
		return fmt.Errorf("%s takes one priority (critical, high, normal, low, idle) or `type <type>`, got %d arguments", cmd, len(pos))
	}
	var p spool.Priority
	if typ == "" {
		if p, err = spool.ParsePriority(pos[0]); err != nil {
			return fmt.Errorf("%s: %w", cmd, err)
		}
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
	if typ != "" {
		var who, why string
		if cmd == "pause" {
			who, why = *by, *reason
		}
		return pauseType(ctx, sess.admin, cmd, typ, end, who, why, stdout)
	}
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

// pauseType pauses (cmd "pause") or resumes task type typ.
func pauseType(ctx context.Context, adm *admin.Client, cmd, typ string, end time.Time, by, reason string, stdout io.Writer) error {
	if cmd == "resume" {
		if err := adm.ResumeType(ctx, typ); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "resumed type %s: the workers move its parked tasks back\n", typ)
		return nil
	}
	if by == "" {
		if u, err := user.Current(); err == nil {
			by = u.Username
		}
	}
	tp, err := adm.PauseType(ctx, typ, admin.TypePauseOptions{Until: end, By: by, Reason: reason})
	if err != nil {
		return err
	}
	if tp.Until == nil {
		fmt.Fprintf(stdout, "paused type %s until resumed\n", typ)
	} else {
		fmt.Fprintf(stdout, "paused type %s until %s\n", typ, tp.Until.UTC().Format(time.RFC3339))
	}
	return nil
}
