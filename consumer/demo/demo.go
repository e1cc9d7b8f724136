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
	// Progress works through {"steps":N,"ms":M} steps of M milliseconds
	// (default 5 steps of 1000), reports progress after each one
	// (percent and {"step":I,"steps":N}) and returns {"steps":N}.
	Progress = "demo.progress"
)

// Progress's defaults and its cap on steps: a few reports over a few
// seconds, long enough to watch in the dashboard.
const (
	defaultSteps  = 5
	defaultStepMS = 1000
	maxSteps      = 100
)

// maxSleep caps demo.sleep, so a typo cannot park a slot for days.
const maxSleep = time.Hour

// Register registers the demo handlers demo.echo, demo.sleep, demo.fail
// and demo.progress on m.
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
	m.HandleFunc(Progress, progress)
}

// progress is demo.progress: it sleeps step by step and reports progress
// after each step. A report that cannot be made fails the attempt, so the
// task is retried rather than shown stuck.
func progress(ctx context.Context, t *consumer.Task) ([]byte, error) {
	in := struct {
		Steps int   `json:"steps"`
		MS    int64 `json:"ms"`
	}{Steps: defaultSteps, MS: defaultStepMS}
	if err := decode(t, &in); err != nil {
		return nil, err
	}
	if in.Steps < 1 || in.Steps > maxSteps {
		return nil, consumer.Permanent(fmt.Errorf("demo.progress: steps %d must be 1 to %d", in.Steps, maxSteps))
	}
	step := time.Duration(in.MS) * time.Millisecond
	if step < 0 || step*time.Duration(in.Steps) > maxSleep {
		return nil, consumer.Permanent(fmt.Errorf("demo.progress: ms %d must be 0 to %d, and steps × ms at most %d",
			in.MS, maxSleep.Milliseconds()/int64(in.Steps), maxSleep.Milliseconds()))
	}
	timer := time.NewTimer(step)
	defer timer.Stop()
	for i := 1; i <= in.Steps; i++ {
		select {
		case <-timer.C:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		value := fmt.Appendf(nil, `{"step":%d,"steps":%d}`, i, in.Steps)
		if err := t.Progress(float64(100*i)/float64(in.Steps), value); err != nil {
			return nil, fmt.Errorf("demo.progress: reporting step %d of %d: %w", i, in.Steps, err)
		}
		timer.Reset(step)
	}
	return fmt.Appendf(nil, `{"steps":%d}`, in.Steps), nil
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
