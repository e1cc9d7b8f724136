package consumer_test

import (
	"strings"
	"testing"
	"time"

	"github.com/spoolq/spool/consumer"
	spool "github.com/spoolq/spool/shared"
)

func TestStatsSummary(t *testing.T) {
	t.Parallel()
	s := consumer.Stats{State: consumer.WorkerBusy, Slots: 4, Busy: 3, MaxSlots: 10}
	for _, p := range spool.Priorities {
		s.Priorities = append(s.Priorities, consumer.PriorityStats{Priority: p, Counters: consumer.Counters{Completed: 2, Failed: 1}, Backlog: uint64(p)})
	}
	s.Priorities[spool.Idle].OldestWait = 95 * time.Second
	if tot := s.Total(); tot.Completed != 10 || tot.Failed != 5 {
		t.Errorf("Total %+v", tot)
	}
	line := s.Summary()
	for _, want := range []string{"3/4 busy", "done 10", "failed 5", "idle=4(1m35s)", "critical=0"} {
		if !strings.Contains(line, want) {
			t.Errorf("summary %q lacks %q", line, want)
		}
	}
}
