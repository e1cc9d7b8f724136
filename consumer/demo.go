package consumer

import (
	"context"
	"encoding/json"
	"fmt"
	"time"
)

// Demo task types, registered by RegisterDemo (spool-consumer --demo).
const (
	// DemoEcho returns its payload as the result.
	DemoEcho = "demo.echo"
	// DemoSleep sleeps for {"ms":N} milliseconds (honouring the attempt's
	// deadline) and returns {"slept_ms":N}.
	DemoSleep = "demo.sleep"
	// DemoFail fails the first {"fail_times":N} attempts, then returns
	// {"attempts":A}.
	DemoFail = "demo.fail"
)

// maxDemoSleep caps demo.sleep, so a typo cannot park a slot for days.
const maxDemoSleep = time.Hour

// RegisterDemo registers the demo handlers demo.echo, demo.sleep and
// demo.fail on m.
func RegisterDemo(m *Mux) {
	m.HandleFunc(DemoEcho, func(ctx context.Context, t *Task) ([]byte, error) {
		return t.Payload, nil
	})
	m.HandleFunc(DemoSleep, func(ctx context.Context, t *Task) ([]byte, error) {
		var in struct {
			MS int64 `json:"ms"`
		}
		if err := decodeDemo(t, &in); err != nil {
			return nil, err
		}
		d := time.Duration(in.MS) * time.Millisecond
		if d < 0 || d > maxDemoSleep {
			return nil, Permanent(fmt.Errorf("demo.sleep: ms %d must be 0 to %d", in.MS, maxDemoSleep.Milliseconds()))
		}
		timer := time.NewTimer(d)
		defer timer.Stop()
		select {
		case <-timer.C:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		return fmt.Appendf(nil, `{"slept_ms":%d}`, in.MS), nil
	})
	m.HandleFunc(DemoFail, func(ctx context.Context, t *Task) ([]byte, error) {
		var in struct {
			FailTimes int `json:"fail_times"`
		}
		if err := decodeDemo(t, &in); err != nil {
			return nil, err
		}
		if t.Attempt <= in.FailTimes {
			return nil, fmt.Errorf("demo.fail: failing attempt %d of the first %d", t.Attempt, in.FailTimes)
		}
		return fmt.Appendf(nil, `{"attempts":%d}`, t.Attempt), nil
	})
}

// decodeDemo reads a demo payload; an empty payload is {}. A payload that is
// not JSON is a permanent error: retrying cannot fix it.
func decodeDemo(t *Task, v any) error {
	if len(t.Payload) == 0 {
		return nil
	}
	if err := json.Unmarshal(t.Payload, v); err != nil {
		return Permanent(fmt.Errorf("%s: payload is not the expected JSON: %w", t.Type, err))
	}
	return nil
}
