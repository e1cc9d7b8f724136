package producer

import (
	"testing"
	"testing/synctest"
	"time"

	spool "github.com/spoolq/spool/shared"
)

// ProcessIn is relative to the enqueue call and ProcessAt is absolute: in a
// synctest bubble (clock at 2000-01-01T00:00:00Z, moving only when the
// bubble sleeps) the schedule each one gives is exact. A time not in the
// future publishes the task at once, on its priority subject.
func TestProcessInProcessAtSynctest(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		c := &Client{names: spool.DefaultNames()}
		epoch := time.Now()
		in := ProcessIn(90 * time.Second)
		at := ProcessAt(epoch.Add(30 * time.Minute))
		tests := []struct {
			name  string
			sleep time.Duration // before the enqueue call
			opt   EnqueueOption
			want  time.Time // zero: runs now
		}{
			{"in, called at once", 0, in, epoch.Add(90 * time.Second)},
			{"in counts from the call", 10 * time.Minute, in, epoch.Add(10*time.Minute + 90*time.Second)},
			{"at, in the future", 0, at, epoch.Add(30 * time.Minute)},
			{"at, when its time has come", 20 * time.Minute, at, time.Time{}},
			{"at, past", time.Second, at, time.Time{}},
			{"in zero", 0, ProcessIn(0), time.Time{}},
			{"sub-second kept", 0, ProcessIn(1500 * time.Millisecond), epoch.Add(30*time.Minute + 2500*time.Millisecond)}, // 10m+20m+1s slept, +1.5s
		}
		for _, tc := range tests {
			time.Sleep(tc.sleep)
			task := NewTask("reminder.send", nil)
			task.ID = "task-1"
			tc.opt(&task)
			p, err := c.prepare(task, time.Now(), 1<<20, nil)
			if err != nil {
				t.Fatalf("%s: %v", tc.name, err)
			}
			h := p.msg.Header
			if tc.want.IsZero() {
				if p.scheduled || p.msg.Subject != "spool.tasks.normal.reminder.send" || h.Get(spool.HeaderSchedule) != "" {
					t.Errorf("%s (now %s): scheduled %v on %s with %q, want an immediate task",
						tc.name, time.Now().Format(time.RFC3339), p.scheduled, p.msg.Subject, h.Get(spool.HeaderSchedule))
				}
				continue
			}
			if !p.scheduled || !p.processAt.Equal(tc.want) {
				t.Errorf("%s: scheduled %v at %s, want %s", tc.name, p.scheduled, p.processAt, tc.want)
			}
			if got, want := h.Get(spool.HeaderSchedule), spool.FormatScheduleAt(tc.want); got != want {
				t.Errorf("%s: %s %q, want %q", tc.name, spool.HeaderSchedule, got, want)
			}
			if p.msg.Subject != "spool.sched.task-1" || h.Get(spool.HeaderScheduleTarget) != "spool.tasks.normal.reminder.send" ||
				h.Get(spool.HeaderTaskID) != "task-1" {
				t.Errorf("%s: subject %s, headers %v", tc.name, p.msg.Subject, h)
			}
		}
	})
}
