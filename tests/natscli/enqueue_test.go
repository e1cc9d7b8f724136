package natscli_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/spoolq/spool/streams"
	"github.com/spoolq/spool/streams/streamstest"
)

// TestEnqueueExamples runs the contract's first two worked examples with
// the `nats` CLI, on a stack with no worker so the tasks stay queued: the
// immediate task is stored on its task subject with its id and retries,
// and the delayed one, whose time has passed, fires onto its target with
// its id kept and leaves no schedule behind.
func TestEnqueueExamples(t *testing.T) {
	t.Parallel()
	bin := natsBin(t)
	blocks := contractBlocks(t)
	now := block(t, blocks, "-H Nats-Msg-Id:welcome-ada -H Spool-Max-Retries:5")
	delayed := block(t, blocks, "spool.sched.report-42")
	env := streamstest.Start(t, streams.Settings{Consumers: streams.ConsumersByPriority})
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	for _, c := range append(now, delayed...) {
		run(ctx, t, bin, env.URL, c)
	}

	tasks := env.Stream(t, "SPOOL_TASKS")
	msg, err := tasks.GetLastMsgForSubject(ctx, "spool.tasks.high.email.send")
	if err != nil {
		t.Fatalf("the immediate task is not on its task subject: %v", err)
	}
	if id, retries := msg.Header.Get("Nats-Msg-Id"), msg.Header.Get("Spool-Max-Retries"); id != "welcome-ada" || retries != "5" {
		t.Errorf("the immediate task carries id %q and retries %q, want welcome-ada and 5", id, retries)
	}
	streamstest.WaitFor(t, 20*time.Second, func() error {
		msg, err := tasks.GetLastMsgForSubject(ctx, "spool.tasks.normal.report.build")
		if err != nil {
			return fmt.Errorf("the delayed task has not fired onto its target: %w", err)
		}
		if id := msg.Header.Get("Spool-Task-Id"); id != "report-42" {
			return fmt.Errorf("the fired task carries Spool-Task-Id %q, want report-42", id)
		}
		if _, err := tasks.GetLastMsgForSubject(ctx, "spool.sched.report-42"); err == nil {
			return fmt.Errorf("the schedule spool.sched.report-42 is still stored after it fired")
		}
		return nil
	})
}
