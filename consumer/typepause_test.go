package consumer_test

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/spoolq/spool/consumer"
	spool "github.com/spoolq/spool/shared"
	"github.com/spoolq/spool/streams"
	"github.com/spoolq/spool/streams/admin"
	"github.com/spoolq/spool/streams/streamstest"
)

// On a task stream provisioned before type pauses (no spool.parked.>), a
// task of a paused type is handed back as a schedule instead of parked:
// it does not run while paused, keeps its attempt count, and runs once
// after the resume.
func TestPausedTypeWithoutParkedSubjects(t *testing.T) {
	t.Parallel()
	e := newEnv(t, streams.Settings{Consumers: streams.ConsumersByPriority})
	ctx := testCtx(t)
	cfg := e.topo.TaskStreamConfig()
	cfg.Subjects = slices.DeleteFunc(cfg.Subjects, func(s string) bool { return s == e.names.ParkedFilter() })
	if _, err := e.js.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	adm, err := admin.New(e.connect(), admin.WithLogger(testLogger(t)))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := adm.PauseType(ctx, "report", admin.TypePauseOptions{}); err != nil {
		t.Fatal(err)
	}
	var paused atomic.Bool
	paused.Store(true)
	var attempt atomic.Int64
	mux := consumer.NewMux()
	mux.HandleFunc("report", func(ctx context.Context, task *consumer.Task) ([]byte, error) {
		if paused.Load() {
			t.Errorf("task %s of a paused type ran", task.ID)
		}
		attempt.Store(int64(task.Attempt))
		return nil, nil
	})
	mux.HandleFunc("email", func(ctx context.Context, task *consumer.Task) ([]byte, error) { return nil, nil })
	e.worker(mux)
	e.publishID(spool.High, "report", "r1", nil, nil)
	e.publishID(spool.High, "email", "e1", nil, nil)
	e.waitResult("e1", spool.StateCompleted, 10*time.Second)
	// The task was handed back as a schedule (it waits on spool.sched.r1).
	streamstest.WaitFor(t, 10*time.Second, func() error {
		s, err := e.js.Stream(ctx, e.names.TaskStream())
		if err != nil {
			return err
		}
		info, err := s.Info(ctx, jetstream.WithSubjectFilter(e.names.SchedFilter()))
		if err != nil {
			return err
		}
		if info.State.Subjects["spool.sched.r1"] != 1 {
			return fmt.Errorf("schedules %v, want spool.sched.r1", info.State.Subjects)
		}
		return nil
	})
	paused.Store(false)
	if err := adm.ResumeType(ctx, "report"); err != nil {
		t.Fatal(err)
	}
	doc := e.waitResult("r1", spool.StateCompleted, 20*time.Second)
	if doc.Attempts != 1 || attempt.Load() != 1 {
		t.Errorf("the handed-back task completed on attempt %d (handler saw %d), want 1", doc.Attempts, attempt.Load())
	}
}
