package demo

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/spoolq/spool/consumer"
)

// Demo task types, registered by Register (spool-consumer --demo).
const (
	// Echo returns its payload as the result.
	Echo = "demo.echo"
	// Sleep sleeps for {"ms":N} milliseconds (honouring the attempt's
	// deadline) and returns {"slept_ms":N}.
	Sleep = "demo.sleep"
	// Fail fails the first {"fail_times":N} attempts, then returns
	// {"attempts":A}.
	Fail = "demo.fail"
)

// maxSleep caps demo.sleep, so a typo cannot park a slot for days.
const maxSleep = time.Hour

// Register registers the demo handlers demo.echo, demo.sleep and demo.fail
// on m.
func Register(m *consumer.Mux) {
	m.HandleFunc(Echo, func(ctx context.Context, t *consumer.Task) ([]byte, error) {
		return t.Payload, nil
	})
	m.HandleFunc(Sleep, func(ctx context.Context, t *consumer.Task) ([]byte, error) {
		var in struct {
			MS int64 `json:"ms"`
		}
		if err := decode(t, &in); err != nil {
			return nil, err
		}
		d := time.Duration(in.MS) * time.Millisecond
		if d < 0 || d > maxSleep {
			return nil, consumer.Permanent(fmt.Errorf("demo.sleep: ms %d must be 0 to %d", in.MS, maxSleep.Milliseconds()))
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
	m.HandleFunc(Fail, func(ctx context.Context, t *consumer.Task) ([]byte, error) {
		var in struct {
			FailTimes int `json:"fail_times"`
		}
		if err := decode(t, &in); err != nil {
			return nil, err
		}
		if t.Attempt <= in.FailTimes {
			return nil, fmt.Errorf("demo.fail: failing attempt %d of the first %d", t.Attempt, in.FailTimes)
		}
		return fmt.Appendf(nil, `{"attempts":%d}`, t.Attempt), nil
	})
}

// decode reads a demo payload; an empty payload is {}. A payload that is
// not JSON is a permanent error: retrying cannot fix it.
func decode(t *consumer.Task, v any) error {
	if len(t.Payload) == 0 {
		return nil
	}
	if err := json.Unmarshal(t.Payload, v); err != nil {
		return consumer.Permanent(fmt.Errorf("%s: payload is not the expected JSON: %w", t.Type, err))
	}
	return nil
}
