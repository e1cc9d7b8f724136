package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	spool "github.com/spoolq/spool/shared"
	"github.com/spoolq/spool/shared/cli"
	"github.com/spoolq/spool/streams/admin"
)

const scheduleUsage = `usage: spool-admin schedule <command> [flags]

commands:
  list                       every periodic schedule with its next run
  set NAME --spec S --type T [--priority P] [--tz ZONE] [--payload JSON]
           [--max-retries N] [--task-timeout D] create or replace a schedule
  pause NAME | resume NAME   stop or restart its ticks, keeping it
  delete NAME                remove it

spec: "@every 30s" (at least 1s), a cron of 5 fields "*/5 * * * *" or 6 with
seconds "0 */5 * * * *", or @hourly, @daily, @weekly, @monthly, @yearly;
--tz (cron only) is an IANA zone, default UTC.

flags:
  --json         (list) print JSON
  --url URL      NATS server URL (overrides SPOOL_NATS_URL)
  --timeout D    time allowed for the command (default 30s)
`

// runSchedule runs `spool-admin schedule <command>`.
func runSchedule(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if done, err := familyHelp("schedule", scheduleUsage, args, stdout); done {
		return err
	}
	cmd, args := args[0], args[1:]
	fs := cli.NewFlagSet("spool-admin schedule " + cmd)
	verbose := cli.Verbose(fs)
	url := fs.String("url", "", "NATS server URL (overrides SPOOL_NATS_URL)")
	cmdTimeout := fs.Duration("timeout", 30*time.Second, "time allowed for the command")
	asJSON := fs.Bool("json", false, "print JSON (list)")
	spec := fs.String("spec", "", "when it fires")
	typ := fs.String("type", "", "task type")
	prio := fs.String("priority", "normal", "task priority")
	tz := fs.String("tz", "", "IANA time zone of a cron spec (default UTC)")
	payload := fs.String("payload", "", "task payload (any bytes; JSON by convention)")
	maxRetries := fs.Int("max-retries", -1, "retries after the first attempt (default: the worker's)")
	timeout := fs.Duration("task-timeout", 0, "the tasks' per-attempt timeout (default: the worker's)")
	pos, err := parseInterleaved(fs, args)
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprint(stdout, scheduleUsage)
	}
	if err != nil {
		return err
	}
	switch cmd {
	case "list":
		if len(pos) != 0 {
			return fmt.Errorf("schedule list takes no arguments, got %q", pos)
		}
	case "set", "pause", "resume", "delete":
		if len(pos) != 1 {
			return fmt.Errorf("schedule %s takes one schedule name, got %d arguments", cmd, len(pos))
		}
	default:
		fmt.Fprint(stderr, scheduleUsage)
		return fmt.Errorf("unknown schedule command %q", cmd)
	}
	var s admin.Schedule
	if cmd == "set" {
		p, err := spool.ParsePriority(*prio)
		if err != nil {
			return fmt.Errorf("--priority: %w", err)
		}
		if *spec == "" || *typ == "" {
			return errors.New("schedule set needs --spec and --type")
		}
		s = admin.Schedule{Name: pos[0], Spec: *spec, TimeZone: *tz, Type: *typ, Priority: p, Payload: []byte(*payload), Timeout: *timeout}
		if *maxRetries >= 0 {
			s.MaxRetries = maxRetries
		}
	}
	ctx, sess, done, err := openFor(ctx, *url, *verbose, *cmdTimeout, stderr)
	if err != nil {
		return err
	}
	defer done()
	adm := sess.admin
	switch cmd {
	case "list":
		list, err := adm.Schedules(ctx)
		if err != nil {
			return err
		}
		if *asJSON {
			enc := json.NewEncoder(stdout)
			enc.SetIndent("", "  ")
			return enc.Encode(list)
		}
		return printSchedules(stdout, list)
	case "set":
		if err := adm.SetSchedule(ctx, s); err != nil {
			return err
		}
		got, err := adm.GetSchedule(ctx, s.Name)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "schedule %s set: %s → %s.%s, next run %s\n", got.Name, got.Spec, got.Priority, got.Type, fmtNext(got.NextRun))
	case "pause":
		if err := adm.PauseSchedule(ctx, pos[0]); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "schedule %s paused\n", pos[0])
	case "resume":
		if err := adm.ResumeSchedule(ctx, pos[0]); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "schedule %s resumed\n", pos[0])
	case "delete":
		if err := adm.DeleteSchedule(ctx, pos[0]); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "schedule %s deleted\n", pos[0])
	}
	return nil
}

func fmtNext(t *time.Time) string {
	if t == nil {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}

func printSchedules(w io.Writer, list []admin.Schedule) error {
	if len(list) == 0 {
		_, err := fmt.Fprintln(w, "no schedules")
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "name\tspec\ttime zone\tpriority\ttype\tstate\tnext run")
	for _, s := range list {
		state := "active"
		if s.Paused {
			state = "paused"
		}
		tz := s.TimeZone
		if tz == "" {
			tz = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", s.Name, s.Spec, tz, s.Priority, s.Type, state, fmtNext(s.NextRun))
	}
	return tw.Flush()
}
