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

// Rule is the flow-control rule of one task type, or of every type a type
// pattern matches (see Set for which rule governs a type): the document
// stored under RuleKey(Type) in the limits bucket. A zero field sets no
// limit.
type Rule struct {
	// Type is the task type the rule governs, or a type pattern ("email.*",
	// "email.>", ">"): each type it matches is limited on its own, as if
	// the rule were stored under it.
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
	// Keys sets other per-key limits for the keys a key pattern matches
	// (a key, or a prefix followed by "*": "vip-*"): the most precise
	// pattern matching a key (see KeyLimit) replaces KeyConcurrency and
	// KeyRate for it, a field it leaves out being no limit; keys no
	// pattern matches have KeyConcurrency and KeyRate.
	Keys map[string]KeyLimit `json:"keys,omitempty"`
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

// KeyLimit is the per-key limits of the keys one pattern of Rule.Keys
// matches; a zero field sets no limit.
type KeyLimit struct {
	Concurrency int   `json:"concurrency,omitempty"`
	Rate        *Rate `json:"rate,omitempty"`
}

// MaxKeyPatterns bounds the number of patterns of Rule.Keys.
const MaxKeyPatterns = 1_000

// KeyLimit returns the per-key limits of key: those of the most precise
// pattern of Keys matching it (see MatchKey), else KeyConcurrency and
// KeyRate. An empty key (a task without one) has no per-key limit.
func (r Rule) KeyLimit(key string) KeyLimit {
	if key == "" {
		return KeyLimit{}
	}
	if p, ok := MatchKey(r.Keys, key); ok {
		return r.Keys[p]
	}
	return KeyLimit{Concurrency: r.KeyConcurrency, Rate: r.KeyRate}
}

// ForKey returns the rule as it applies to a task of key: KeyConcurrency
// and KeyRate are the key's (KeyLimit).
func (r Rule) ForKey(key string) Rule {
	if len(r.Keys) == 0 {
		return r
	}
	kl := r.KeyLimit(key)
	r.KeyConcurrency, r.KeyRate = kl.Concurrency, kl.Rate
	return r
}

// probeAbove is how many patterns MatchKey scans; above it, it looks up
// the key's prefixes instead.
const probeAbove = 16

// MatchKey returns the most precise key pattern of patterns that matches
// key: a pattern equal to the key, else the pattern "<prefix>*" with the
// longest prefix of key. The patterns of Rule.Keys and Fair.Weights have
// this syntax.
func MatchKey[V any](patterns map[string]V, key string) (string, bool) {
	if _, ok := patterns[key]; ok && !strings.HasSuffix(key, "*") {
		return key, true
	}
	if len(patterns) > probeAbove && len(key) <= spool.MaxKeyLen {
		// Many patterns: look the key's prefixes up, longest first,
		// rather than scan every pattern.
		var buf [spool.MaxKeyLen + 1]byte
		b := buf[:len(key)+1]
		copy(b, key)
		for i := len(key); i >= 0; i-- {
			b[i] = '*'
			if _, ok := patterns[string(b[:i+1])]; ok {
				return string(b[:i+1]), true
			}
		}
		return "", false
	}
	best, found := "", false
	for p := range patterns {
		prefix, wild := strings.CutSuffix(p, "*")
		if wild && strings.HasPrefix(key, prefix) && (!found || len(p) > len(best)) {
			best, found = p, true
		}
	}
	return best, found
}

// validateKeyPattern checks a key pattern of Rule.Keys: a key, or a
// prefix followed by one final "*"; "*" alone is what KeyConcurrency and
// KeyRate are for.
func validateKeyPattern(p string) error {
	body, _ := strings.CutSuffix(p, "*")
	switch {
	case p == "":
		return errors.New("a key pattern is empty")
	case p == "*":
		return errors.New(`the key pattern "*" matches every key: set key_concurrency and key_rate instead`)
	case strings.Contains(body, "*"):
		return fmt.Errorf("key pattern %q has a * before its end: a pattern is a key, or a prefix followed by one final *", p)
	case len(body) > spool.MaxKeyLen:
		return fmt.Errorf("key pattern %q is %d bytes, at most %d", p, len(body), spool.MaxKeyLen)
	case strings.ContainsAny(p, "\r\n"):
		return fmt.Errorf("key pattern %q contains CR or LF", p)
	}
	return nil
}

// Fair sets the shares of a fair type's keys.
type Fair struct {
	// Window is how many tasks of a key of weight 1 are queued or running
	// at once; 0 is DefaultFairWindow. A key's share of the workers, while
	// the keys are backlogged, is its window's share of all windows.
	Window int `json:"window,omitempty"`
	// Weights multiplies the window of the keys a pattern matches: a key,
	// or a prefix followed by "*"; the most precise matching pattern wins
	// (MatchKey: the key itself, else the longest prefix); other keys
	// weigh 1.
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

// Weight is the weight of key: that of the most precise pattern matching
// it (MatchKey), or 1.
func (f Fair) Weight(key string) int {
	if p, ok := MatchKey(f.Weights, key); ok {
		return f.Weights[p]
	}
	return 1
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

// MaxSlack bounds the slack of a rate without a burst, and SlackShare is
// the share of its period, in parts per thousand, it is at least (see
// GCRA).
const (
	MaxSlack   = 50 * time.Millisecond
	SlackShare = 25
)

// GCRA returns the parameters of the generic cell-rate algorithm that
// enforces r: a start is allowed when tat − now ≤ tolerance, and moves
// the theoretical arrival time tat to max(tat, now) + interval.
//
// With a burst B above 1, interval is Period/Limit and tolerance
// (B−1)·interval: B starts may go at once after an idle spell, so a
// window of a period holds at most Limit+B−1 starts.
//
// Without a burst, a start may be up to a slack early or late
// (min(max(Period/Limit/2, Period·SlackShare/1000), MaxSlack): 25ms of a
// one-second period) without pushing back every later start: a worker
// takes the starts due within that span together, and one that wakes a
// little late for them still takes them. Any half-open window [t,
// t+Period) still holds at most Limit starts: the interval is
// (Period+slack)/Limit, rounded up, so the steady rate is
// Limit·Period/(Period+slack) (97.6% of a rate per second, 95% of 1/s).
// Proof: GCRA lets n starts t_1 ≤ … ≤ t_n through only when t_n − t_1 ≥
// (n−1)·interval − slack; for n = Limit+1 that is at least Period, so
// they do not fit in a window of a period.
func (r Rate) GCRA() (interval, tolerance time.Duration) {
	iv := r.Interval()
	if b := r.BurstOrOne(); b > 1 {
		return iv, time.Duration(b-1) * iv
	}
	slack := min(max(iv/2, time.Duration(r.Period)*SlackShare/1000), MaxSlack)
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
	if err := ValidateName(r.Type); err != nil {
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
	if err := validateRate("rate", r.Rate); err != nil {
		return err
	}
	if err := validateRate("key_rate", r.KeyRate); err != nil {
		return err
	}
	if len(r.Keys) > MaxKeyPatterns {
		return fmt.Errorf("%w: keys has %d patterns, at most %d", ErrInvalidRule, len(r.Keys), MaxKeyPatterns)
	}
	for p, kl := range r.Keys {
		if err := validateKeyPattern(p); err != nil {
			return fmt.Errorf("%w: keys: %w", ErrInvalidRule, err)
		}
		field := fmt.Sprintf("keys[%q]", p)
		if kl.Concurrency < 0 || kl.Concurrency > MaxConcurrency {
			return fmt.Errorf("%w: %s.concurrency %d must be 0 (no limit) to %d", ErrInvalidRule, field, kl.Concurrency, MaxConcurrency)
		}
		if err := validateRate(field+".rate", kl.Rate); err != nil {
			return err
		}
	}
	return nil
}

// validateRate checks the rate of field, if set.
func validateRate(field string, r *Rate) error {
	switch {
	case r == nil:
		return nil
	case r.Limit < 1:
		return fmt.Errorf("%w: %s.limit %d must be at least 1", ErrInvalidRule, field, r.Limit)
	case time.Duration(r.Period) < time.Millisecond || time.Duration(r.Period) > 24*time.Hour:
		return fmt.Errorf("%w: %s.period %s must be 1ms to 24h", ErrInvalidRule, field, time.Duration(r.Period))
	case r.Interval() < time.Microsecond:
		return fmt.Errorf("%w: %s: %d per %s is above 1,000,000 per second", ErrInvalidRule, field, r.Limit, time.Duration(r.Period))
	case r.Burst < 0 || r.Burst > r.Limit:
		return fmt.Errorf("%w: %s.burst %d must be 0 to the limit (%d)", ErrInvalidRule, field, r.Burst, r.Limit)
	}
	return nil
}

// Empty reports whether the rule limits and orders nothing.
func (r Rule) Empty() bool { return !r.Limits() && r.Ordered == "" && r.Fair == nil }

// Limits reports whether the rule sets a concurrency or rate limit (leases
// to take before a task runs).
func (r Rule) Limits() bool {
	if r.Concurrency != 0 || r.KeyConcurrency != 0 || r.Rate != nil || r.KeyRate != nil {
		return true
	}
	for _, kl := range r.Keys {
		if kl.Concurrency != 0 || kl.Rate != nil {
			return true
		}
	}
	return false
}

// Decode parses and validates a rule document stored under key (the task
// type, or a pattern's RuleKey); the document's type, when set, must be
// the one the key names.
func Decode(key string, data []byte) (Rule, error) {
	name, err := RuleName(key)
	if err != nil {
		return Rule{}, err
	}
	var r Rule
	dec := json.NewDecoder(strings.NewReader(string(data)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil {
		return Rule{}, fmt.Errorf("%w: rule %q: %w", ErrInvalidRule, name, err)
	}
	if r.Type == "" {
		r.Type = name
	}
	if r.Type != name {
		return Rule{}, fmt.Errorf("%w: rule stored under %q names type %q, not %q", ErrInvalidRule, key, r.Type, name)
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
