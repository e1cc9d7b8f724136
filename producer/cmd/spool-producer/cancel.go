package main

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/spoolq/spool/producer"
	spool "github.com/spoolq/spool/shared"
)

// runCancel is spool-producer cancel: it cancels one task by id, wherever
// it waits or runs.
func runCancel(ctx context.Context, cfg Config, env *cmdEnv, args []string) error {
	fs := newFlags("cancel", "spool-producer cancel [--by WHO] [--reason WHY] ID", env)
	by := fs.String("by", defaultCanceller(), "who cancels, stored in the result's cancelled_by")
	reason := fs.String("reason", "", "why, stored in the result's cancel_reason (default none)")
	pos, err := fs.parse(args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return fmt.Errorf("cancel takes one task id, got %d arguments", len(pos))
	}
	if err := checkID(pos[0]); err != nil {
		return err
	}
	s, err := connect(ctx, cfg, fs, true)
	if err != nil {
		return err
	}
	defer s.close()
	res, err := s.client.Cancel(ctx, pos[0], producer.CancelBy(*by), producer.CancelReason(*reason))
	if errors.Is(err, producer.ErrTaskFinished) && res.State == spool.StateCancelled {
		return fmt.Errorf("task %q was already cancelled by %s (%s)", pos[0], res.CancelledBy, res.CancelReason)
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(env.stdout, "cancelled %s\n", pos[0])
	return nil
}

// defaultCanceller is the -by default of cancel: $USER@host.
func defaultCanceller() string {
	host, err := os.Hostname()
	if err != nil {
		host = "unknown"
	}
	user := os.Getenv("USER")
	if user == "" {
		user = "spool-producer"
	}
	return user + "@" + host
}
