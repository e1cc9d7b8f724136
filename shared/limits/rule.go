package limits

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	spool "github.com/spoolq/spool/shared"
)

// ErrInvalidRule: a rule document does not hold.
var ErrInvalidRule = errors.New("invalid limit rule")

// MaxConcurrency is the largest concurrency limit a rule may set: each slot
// is a lease key, tried in turn when the view of the fleet is stale.
const MaxConcurrency = 100_000

// Rule is the flow-control rule of one task type: the document stored under
// the type in the limits bucket. A zero field sets no limit.
type Rule struct {
	// Type is the task type the rule governs (the KV key).
	Type string `json:"type"`
	// Concurrency is the most tasks of the type running at once across
	// the fleet; 0: no limit.
	Concurrency int `json:"concurrency,omitempty"`
	// Rate caps the starts of the type across the fleet.
	Rate *Rate `json:"rate,omitempty"`
	// KeyConcurrency is the most tasks of one Spool-Key running at once
	// across the fleet (for each key of the type; tasks without a key are
	// not counted); 0: no limit.
	KeyConcurrency int `json:"key_concurrency,omitempty"`
	// KeyRate caps the starts of each Spool-Key of the type.
	KeyRate *Rate `json:"key_rate,omitempty"`
	// Ordered runs the tasks of one Spool-Key of the type one at a time in
	// enqueue order (see Turns): OrderHold keeps the key's turn with a
	// failing task until it completes or is dead-lettered, OrderSkip passes
	// the turn on at its first failure (its retries then run outside the
	// order). Empty: no ordering. Tasks without a key are not ordered.
	Ordered string `json:"ordered,omitempty"`
	// Fair shares the workers between the keys of the type within its
	// priority: each key's tasks wait on its held subject and at most its
	// window of them are queued or running at once, so a key with a deep
	// backlog queued first does not starve the keys queued after it. Tasks
	// without a key are not counted. With Ordered, every key's window is 1.
	Fair *Fair `json:"fair,omitempty"`
}

// Fair sets the shares of a fair type's keys.
type Fair struct {
	// Window is how many tasks of a key of weight 1 are queued or running
	// at once; 0 is DefaultFairWindow. A key's share of the workers, while
	// the keys are backlogged, is its window's share of all windows.
	Window int `json:"window,omitempty"`
	// Weights multiplies the window of the keys a pattern matches: a key,
	// or a prefix followed by "*"; the longest matching pattern wins; other
	// keys weigh 1.
	Weights map[string]int `json:"weights,omitempty"`
}

// DefaultFairWindow is Fair.Window when unset; MaxFairWindow bounds the
// window and a key's window times its weight (each released task is
// listed in its key's turn), MaxFairWeight the weights, MaxFairPatterns
// the number of weights.
const (
	DefaultFairWindow = 10
	MaxFairWindow     = 1_000
	MaxFairWeight     = 100
	MaxFairPatterns   = 1_000
)

// KeyWindow is how many tasks of key may be released from its held
// subject at once (queued or running): 1 for an ordered type, the key's
// fair window for a fair one, 0 when the rule holds no tasks back (no
// ordering, no fairness, or no key).
func (r Rule) KeyWindow(key string) int {
	switch {
	case key == "":
		return 0
	case r.Ordered != "":
		return 1
	case r.Fair == nil:
		return 0
	}
	w := r.Fair.Window
	if w == 0 {
		w = DefaultFairWindow
	}
	return min(MaxFairWindow, w*r.Fair.Weight(key))
}

// Weight is the weight of key: that of the longest pattern matching it,
// or 1.
func (f Fair) Weight(key string) int {
	best, weight := -1, 1
	for p, w := range f.Weights {
		prefix, wild := strings.CutSuffix(p, "*")
		if (wild && strings.HasPrefix(key, prefix) || !wild && key == p) && len(p) > best {
			best, weight = len(p), w
		}
	}
	return weight
}

// The values of Rule.Ordered.
const (
	OrderHold = "hold"
	OrderSkip = "skip"
)

// Rate is a smooth rate limit: Limit starts per Period, spaced evenly
// (one every Period/Limit), with up to Burst starts at once after an idle
// spell.
type Rate struct {
	Limit  int      `json:"limit"`
	Period Duration `json:"period"`
	// Burst is how many starts may go at once after an idle spell; 0 is
	// 1 (perfectly even spacing).
	Burst int `json:"burst,omitempty"`
}

// Interval is the spacing of starts: Period/Limit.
func (r Rate) Interval() time.Duration {
	return time.Duration(r.Period) / time.Duration(r.Limit)
}

// BurstOrOne is Burst, or 1 when unset.
func (r Rate) BurstOrOne() int { return max(1, r.Burst) }

// MaxSlack bounds the slack of a rate without a burst (see GCRA).
const MaxSlack = 50 * time.Millisecond

// GCRA returns the parameters of the generic cell-rate algorithm that
// enforces r: a start is allowed when tat − now ≤ tolerance, and moves
// the theoretical arrival time tat to max(tat, now) + interval.
//
// With a burst B above 1, interval is Period/Limit and tolerance
// (B−1)·interval: B starts may go at once after an idle spell, so a
// window of a period holds at most Limit+B−1 starts.
//
// Without a burst, a start may be up to a slack late (min(Period/Limit/2,
// MaxSlack): a worker that wakes late for its turn) without pushing back
// every later start, and any half-open window [t, t+Period) still holds
// at most Limit starts: the interval is (Period+slack)/Limit, rounded up,
// so the steady rate is Limit·Period/(Period+slack) (99% of 50/s, 95% of
// 1/s). Proof: GCRA lets n starts t_1 ≤ … ≤ t_n through only when t_n −
// t_1 ≥ (n−1)·interval − slack; for n = Limit+1 that is at least Period,
// so they do not fit in a window of a period.
func (r Rate) GCRA() (interval, tolerance time.Duration) {
	iv := r.Interval()
	if b := r.BurstOrOne(); b > 1 {
		return iv, time.Duration(b-1) * iv
	}
	slack := min(iv/2, MaxSlack)
	n := time.Duration(r.Limit)
	return (time.Duration(r.Period) + slack + n - 1) / n, slack
}

// Duration is a time.Duration written in JSON as a Go duration string
// ("1s", "1m30s").
type Duration time.Duration

// MarshalJSON writes d as a Go duration string.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

// UnmarshalJSON reads a Go duration string.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("a duration is a string such as \"1s\" or \"1m\": %w", err)
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("period %q is not a Go duration such as 1s or 1m", s)
	}
	*d = Duration(v)
	return nil
}

// Validate checks the rule; the error names the JSON field at fault and
// wraps ErrInvalidRule.
func (r Rule) Validate() error {
	if err := spool.ValidateType(r.Type); err != nil {
		return fmt.Errorf("%w: type: %w", ErrInvalidRule, err)
	}
	for _, c := range []struct {
		field string
		n     int
	}{{"concurrency", r.Concurrency}, {"key_concurrency", r.KeyConcurrency}} {
		if c.n < 0 || c.n > MaxConcurrency {
			return fmt.Errorf("%w: %s %d must be 0 (no limit) to %d", ErrInvalidRule, c.field, c.n, MaxConcurrency)
		}
	}
	if r.Ordered != "" && r.Ordered != OrderHold && r.Ordered != OrderSkip {
		return fmt.Errorf("%w: ordered %q must be %q, %q or empty (no ordering)", ErrInvalidRule, r.Ordered, OrderHold, OrderSkip)
	}
	if f := r.Fair; f != nil {
		if f.Window < 0 || f.Window > MaxFairWindow {
			return fmt.Errorf("%w: fair.window %d must be 0 (default %d) to %d", ErrInvalidRule, f.Window, DefaultFairWindow, MaxFairWindow)
		}
		if len(f.Weights) > MaxFairPatterns {
			return fmt.Errorf("%w: fair.weights has %d patterns, at most %d", ErrInvalidRule, len(f.Weights), MaxFairPatterns)
		}
		for p, w := range f.Weights {
			if p == "" {
				return fmt.Errorf("%w: fair.weights: a key pattern is empty", ErrInvalidRule)
			}
			if w < 1 || w > MaxFairWeight {
				return fmt.Errorf("%w: fair.weights[%q] %d must be 1 to %d", ErrInvalidRule, p, w, MaxFairWeight)
			}
		}
	}
	for _, c := range []struct {
		field string
		r     *Rate
	}{{"rate", r.Rate}, {"key_rate", r.KeyRate}} {
		if c.r == nil {
			continue
		}
		switch {
		case c.r.Limit < 1:
			return fmt.Errorf("%w: %s.limit %d must be at least 1", ErrInvalidRule, c.field, c.r.Limit)
		case time.Duration(c.r.Period) < time.Millisecond || time.Duration(c.r.Period) > 24*time.Hour:
			return fmt.Errorf("%w: %s.period %s must be 1ms to 24h", ErrInvalidRule, c.field, time.Duration(c.r.Period))
		case c.r.Interval() < time.Microsecond:
			return fmt.Errorf("%w: %s: %d per %s is above 1,000,000 per second", ErrInvalidRule, c.field, c.r.Limit, time.Duration(c.r.Period))
		case c.r.Burst < 0 || c.r.Burst > c.r.Limit:
			return fmt.Errorf("%w: %s.burst %d must be 0 to the limit (%d)", ErrInvalidRule, c.field, c.r.Burst, c.r.Limit)
		}
	}
	return nil
}

// Empty reports whether the rule limits and orders nothing.
func (r Rule) Empty() bool { return !r.Limits() && r.Ordered == "" && r.Fair == nil }

// Limits reports whether the rule sets a concurrency or rate limit (leases
// to take before a task runs).
func (r Rule) Limits() bool {
	return r.Concurrency != 0 || r.KeyConcurrency != 0 || r.Rate != nil || r.KeyRate != nil
}

// Decode parses and validates a rule document stored under key (the task
// type); the document's type must match it.
func Decode(key string, data []byte) (Rule, error) {
	var r Rule
	dec := json.NewDecoder(strings.NewReader(string(data)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil {
		return Rule{}, fmt.Errorf("%w: rule %q: %w", ErrInvalidRule, key, err)
	}
	if r.Type == "" {
		r.Type = key
	}
	if r.Type != key {
		return Rule{}, fmt.Errorf("%w: rule stored under %q names type %q", ErrInvalidRule, key, r.Type)
	}
	if err := r.Validate(); err != nil {
		return Rule{}, err
	}
	return r, nil
}

func jsonMarshal(r Rule) ([]byte, error) {
	b, err := json.Marshal(r)
	if err != nil {
		return nil, fmt.Errorf("encoding the limit rule of %q: %w", r.Type, err)
	}
	return b, nil
}
