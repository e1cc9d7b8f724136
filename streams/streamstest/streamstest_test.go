package streamstest_test

import (
	"errors"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/spoolq/spool/streams"
	"github.com/spoolq/spool/streams/streamstest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func TestStartProvisions(t *testing.T) {
	t.Parallel()
	e := streamstest.Start(t, streams.Settings{AckWait: 2 * time.Second, Consumers: streams.ConsumersByPriority})
	info := e.Stream(t, e.Names.TaskStream()).CachedInfo()
	if !info.Config.AllowMsgSchedules {
		t.Fatalf("task stream not provisioned as designed: %+v", info.Config)
	}
	c, err := e.JS.Consumer(streamstest.Context(t), e.Names.TaskStream(), e.Names.Consumer(0))
	if err != nil {
		t.Fatal(err)
	}
	if got := c.CachedInfo().Config.AckWait; got != 2*time.Second {
		t.Fatalf("settings not applied: AckWait %s", got)
	}
}

func TestWaitFor(t *testing.T) {
	t.Parallel()
	n := 0
	streamstest.WaitFor(t, 5*time.Second, func() error {
		n++
		if n < 3 {
			return errors.New("not yet")
		}
		return nil
	})
	if n != 3 {
		t.Fatalf("cond called %d times, want 3", n)
	}
}
