package limits

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	spool "github.com/spoolq/spool/shared"
)

// ErrNoRule: no rule is stored for the type.
var ErrNoRule = errors.New("no limit rule for this type")

// Store reads and writes the rules of a deployment, and counts the leases
// in use. Workers see a change within a second (they watch the bucket).
type Store struct {
	rules, leases jetstream.KeyValue
}

// Open binds the rules and leases buckets (created by provisioning).
func Open(ctx context.Context, js jetstream.JetStream, names spool.Names) (*Store, error) {
	rules, err := js.KeyValue(ctx, names.LimitsBucket())
	if err != nil {
		return nil, fmt.Errorf("binding bucket %q (provision the topology first): %w", names.LimitsBucket(), err)
	}
	leases, err := js.KeyValue(ctx, names.LeasesBucket())
	if err != nil {
		return nil, fmt.Errorf("binding bucket %q (provision the topology first): %w", names.LeasesBucket(), err)
	}
	return &Store{rules: rules, leases: leases}, nil
}

// Put validates r and stores it, replacing the type's rule. A rule that
// limits nothing deletes the type's rule.
func (s *Store) Put(ctx context.Context, r Rule) error {
	if err := r.Validate(); err != nil {
		return err
	}
	if r.Empty() {
		return s.Delete(ctx, r.Type)
	}
	data, err := jsonMarshal(r)
	if err != nil {
		return err
	}
	if _, err := s.rules.Put(ctx, r.Type, data); err != nil {
		return fmt.Errorf("storing the limit rule of %q: %w", r.Type, err)
	}
	return nil
}

// Delete removes the type's rule: its tasks run unlimited.
func (s *Store) Delete(ctx context.Context, typ string) error {
	if err := spool.ValidateType(typ); err != nil {
		return fmt.Errorf("%w: type: %w", ErrInvalidRule, err)
	}
	if err := s.rules.Delete(ctx, typ); err != nil {
		return fmt.Errorf("deleting the limit rule of %q: %w", typ, err)
	}
	return nil
}

// Get returns the type's rule, or ErrNoRule.
func (s *Store) Get(ctx context.Context, typ string) (Rule, error) {
	e, err := s.rules.Get(ctx, typ)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return Rule{}, fmt.Errorf("%w: %q", ErrNoRule, typ)
	}
	if err != nil {
		return Rule{}, fmt.Errorf("reading the limit rule of %q: %w", typ, err)
	}
	return Decode(typ, e.Value())
}

// List returns every valid rule, by type.
func (s *Store) List(ctx context.Context) ([]Rule, error) {
	lister, err := s.rules.ListKeys(ctx)
	if err != nil {
		return nil, fmt.Errorf("listing limit rules: %w", err)
	}
	var out []Rule
	for k := range lister.Keys() {
		r, err := s.Get(ctx, k)
		if errors.Is(err, ErrNoRule) {
			continue // deleted meanwhile
		}
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Type < out[j].Type })
	return out, nil
}

// BusiestKeys is how many keys Usage.Busiest lists.
const BusiestKeys = 5

// Usage is one rule and its use across the fleet now, read from the
// leases bucket (the slots held and the rate limits' state).
type Usage struct {
	Rule Rule `json:"rule"`
	// Running is the type-wide slots held (tasks of the type running
	// under its concurrency limit).
	Running int `json:"running"`
	// KeysRunning is the per-key slots held, and KeysActive the number of
	// keys holding at least one.
	KeysRunning int `json:"keys_running"`
	KeysActive  int `json:"keys_active"`
	// Busiest is the keys holding the most per-key slots (at most
	// BusiestKeys, most first, then by key).
	Busiest []KeyUsage `json:"busiest_keys,omitempty"`
	// Rate is the state of the type-wide rate limit (nil without one).
	Rate *RateUsage `json:"rate_usage,omitempty"`
}

// KeyUsage is the per-key slots one flow-control key holds.
type KeyUsage struct {
	Key     string `json:"key"`
	Running int    `json:"running"`
}

// RateUsage is the state of a rate limit across the fleet.
type RateUsage struct {
	// NextStart is how long until the limit allows its next start; zero
	// when one is free now. Above zero, the limit is taking every start it
	// allows: its starts in the current period are the limit.
	NextStart time.Duration `json:"next_start_ns"`
	// Waiting is about how many tasks the limit turned away are booked to
	// come back (how far its return queue reaches past the next start,
	// over the spacing of the returns).
	Waiting int `json:"waiting"`
}

// ReturnSpacing is the spacing of the returns a rate limit books for the
// tasks it turns away (q. and kq. keys), in percent of the limit's
// interval, while a worker sees the limit go idle with tasks waiting (for
// 10s after): a backlog then comes back a little faster than the rate, so a
// turn whose task is not there (its worker was killed, its schedule fired
// late) is taken by another. Otherwise returns are booked one interval
// apart.
const ReturnSpacing = 80

// Usage counts the leases held for every rule. Slots of a killed worker
// count until their TTL runs out.
func (s *Store) Usage(ctx context.Context) ([]Usage, error) {
	rules, err := s.List(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]Usage, 0, len(rules))
	for _, r := range rules {
		u := Usage{Rule: r}
		filters := []string{SlotFilter(r.Type, ""), KeySlotFilter(r.Type)}
		lister, err := s.leases.ListKeysFiltered(ctx, filters...)
		if err != nil {
			return nil, fmt.Errorf("listing leases of %q: %w", r.Type, err)
		}
		keys := map[string]int{}
		for k := range lister.Keys() {
			typ, enc, _, ok := ParseSlotKey(k)
			if !ok || typ != r.Type {
				continue
			}
			if enc == "" {
				u.Running++
			} else {
				u.KeysRunning++
				keys[enc]++
			}
		}
		u.KeysActive = len(keys)
		u.Busiest = busiest(keys)
		if r.Rate != nil {
			if u.Rate, err = s.rateUsage(ctx, r.Type, *r.Rate); err != nil {
				return nil, err
			}
		}
		out = append(out, u)
	}
	return out, nil
}

// busiest returns the BusiestKeys keys holding the most slots, decoded.
func busiest(keys map[string]int) []KeyUsage {
	out := make([]KeyUsage, 0, len(keys))
	for enc, n := range keys {
		k, err := DecodeKey(enc)
		if err != nil {
			k = enc
		}
		out = append(out, KeyUsage{Key: k, Running: n})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Running != out[j].Running {
			return out[i].Running > out[j].Running
		}
		return out[i].Key < out[j].Key
	})
	if len(out) > BusiestKeys {
		out = out[:BusiestKeys]
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// rateUsage reads the state of the type's rate limit: its r. and q. keys.
func (s *Store) rateUsage(ctx context.Context, typ string, r Rate) (*RateUsage, error) {
	now := time.Now()
	iv, tol := r.GCRA()
	u := &RateUsage{}
	tat, err := s.instant(ctx, RateKey(typ, ""))
	if err != nil {
		return nil, err
	}
	if !tat.IsZero() {
		u.NextStart = max(0, tat.Sub(now)-tol)
	}
	back, err := s.instant(ctx, QueueKey(typ, ""))
	if err != nil {
		return nil, err
	}
	// Returns are booked from the limit's next start on, about one an
	// interval (ReturnSpacing of it while turns go unused); back is when
	// the next one would be.
	from := now.Add(u.NextStart)
	if iv > 0 && back.After(from) {
		u.Waiting = int((back.Sub(from) + iv/2) / iv)
	}
	return u, nil
}

// instant reads a rate key (Unix nanoseconds); zero when it is absent.
func (s *Store) instant(ctx context.Context, k string) (time.Time, error) {
	e, err := s.leases.Get(ctx, k)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return time.Time{}, nil
	}
	if err != nil {
		return time.Time{}, fmt.Errorf("reading %q: %w", k, err)
	}
	ns, err := strconv.ParseInt(string(e.Value()), 10, 64)
	if err != nil {
		return time.Time{}, nil // not a rate state: nothing to report
	}
	return time.Unix(0, ns), nil
}
