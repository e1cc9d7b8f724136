package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spoolq/spool/shared/workflow"
)

const workflowsUsage = `usage: spool-admin workflows <command> [flags]

commands:
  list         every workflow, newest first: state, steps done of total
  show ID      one workflow: each step's state, attempts and task id
  cancel ID    cancel: steps not started end cancelled, running steps finish
  retry ID     run a failed or cancelled workflow again from the steps that did not complete

flags:
  --json       print JSON
  --url URL    NATS server URL (overrides SPOOL_NATS_URL)
  --timeout D  time allowed for the command (default 30s)
  -v           also log informational lines (connections) on stderr
`

func runWorkflows(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if done, err := familyHelp("workflows", workflowsUsage, args, stdout); done {
		return err
	}
	cmd, args := args[0], args[1:]
	fs, url, asJSON, timeout, verbose := familyFlags("workflows", cmd, workflowsUsage, stderr)
	wantArgs := 1
	switch cmd {
	case "list":
		wantArgs = 0
	case "show", "cancel", "retry":
	default:
		fmt.Fprint(stderr, workflowsUsage)
		return fmt.Errorf("workflows: unknown command %q", cmd)
	}
	// The id may come before or after the flags.
	var pos []string
	for len(args) > 0 {
		if err := fs.Parse(args); err != nil {
			return err
		}
		if fs.NArg() == 0 {
			break
		}
		pos = append(pos, fs.Arg(0))
		args = fs.Args()[1:]
	}
	if len(pos) != wantArgs {
		return fmt.Errorf("workflows %s takes %d argument(s) (a workflow id), got %q", cmd, wantArgs, pos)
	}
	if *timeout <= 0 {
		return fmt.Errorf("--timeout %s must be positive", *timeout)
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	sess, err := open(ctx, *url, *verbose, stderr)
	if err != nil {
		return err
	}
	defer sess.nc.Close()
	store, err := workflow.Open(ctx, sess.js, sess.cfg.Names(), sess.logger)
	if err != nil {
		return err
	}
	var v any
	switch cmd {
	case "list":
		list, err := store.List(ctx)
		if err != nil {
			return err
		}
		if !*asJSON {
			return printWorkflows(stdout, list)
		}
		v = list
	case "show":
		st, err := store.Status(ctx, pos[0])
		if err != nil {
			return err
		}
		if !*asJSON {
			return printWorkflow(stdout, st)
		}
		v = st
	case "cancel", "retry":
		op := store.Cancel
		if cmd == "retry" {
			op = store.RetryFailed
		}
		r, err := op(ctx, pos[0])
		if err != nil {
			return err
		}
		if !*asJSON {
			_, err := fmt.Fprintf(stdout, "workflow %s: %s (%d of %d steps done)\n", r.ID, r.State, r.Done.Count(), r.Steps)
			return err
		}
		v = r
	}
	enc := json.NewEncoder(stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func printWorkflows(w io.Writer, list []workflow.Summary) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSTATE\tDONE\tSUBMITTED\tFAILED STEP")
	for _, s := range list {
		failed := ""
		if s.Failure != nil {
			failed = s.Failure.Step
		}
		fmt.Fprintf(tw, "%s\t%s\t%d/%d\t%s\t%s\n", s.ID, s.State, s.Done, s.Total, s.SubmittedAt.Format(time.RFC3339), failed)
	}
	return tw.Flush()
}

func printWorkflow(w io.Writer, st workflow.Status) error {
	fmt.Fprintf(w, "workflow %s: %s, %d of %d steps done, on_error %s\n", st.ID, st.State, st.Done, st.Total, st.Policy)
	if st.Failure != nil {
		fmt.Fprintf(w, "failed step %s: %s\n", st.Failure.Step, st.Failure.Error)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "STEP\tTYPE\tSTATE\tATTEMPTS\tAFTER\tTASK")
	for _, s := range st.Steps {
		attempts, state := "-", string(s.State)
		if s.Task != nil {
			attempts = fmt.Sprint(s.Task.Attempts)
			if s.State == workflow.Queued {
				state += " (" + string(s.Task.State) + ")"
			}
		}
		name := s.Name
		if s.OnFailure {
			name += " (on failure)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", name, s.Type, state, attempts, strings.Join(s.After, ","), s.TaskID)
	}
	return tw.Flush()
}
