package limits

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	spool "github.com/spoolq/spool/shared"
)

// ErrNoRule: no rule is stored for the type or pattern (Get, Delete), or
// none governs the type (Resolve).
var ErrNoRule = errors.New("no limit rule for this type")

// Store reads and writes the rules of a deployment, and counts the leases
// in use. Workers see a change within a second (they watch the bucket).
type Store struct {
	rules, leases jetstream.KeyValue
	// tasks is the task stream (its waiting rooms); nil when it could not
	// be bound.
	tasks jetstream.Stream
	names spool.Names
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
	// The waiting rooms are counted when the task stream is there: a
	// store that only reads and writes rules does not need it.
	tasks, err := js.Stream(ctx, names.TaskStream())
	if err != nil {
		tasks = nil
	}
	return &Store{rules: rules, leases: leases, tasks: tasks, names: names}, nil
}

// Put validates r and stores it under RuleKey(r.Type), replacing the rule
// of the same type or pattern. A rule that limits nothing deletes it.
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
	if _, err := s.rules.Put(ctx, RuleKey(r.Type), data); err != nil {
		return fmt.Errorf("storing the limit rule of %q: %w", r.Type, err)
	}
	return nil
}

// Delete removes the rule stored under the type or pattern name: the
// types it governed fall to the next rule matching them (Set), or run
// unlimited.
func (s *Store) Delete(ctx context.Context, name string) error {
	if err := ValidateName(name); err != nil {
		return fmt.Errorf("%w: type: %w", ErrInvalidRule, err)
	}
	if err := s.rules.Delete(ctx, RuleKey(name)); err != nil {
		return fmt.Errorf("deleting the limit rule of %q: %w", name, err)
	}
	return nil
}

// Get returns the rule stored under the type or pattern name (not the
// rule governing a type: see Resolve), or ErrNoRule.
func (s *Store) Get(ctx context.Context, name string) (Rule, error) {
	if err := ValidateName(name); err != nil {
		return Rule{}, fmt.Errorf("%w: type: %w", ErrInvalidRule, err)
	}
	return s.get(ctx, RuleKey(name))
}

// get reads the rule stored under a bucket key.
func (s *Store) get(ctx context.Context, key string) (Rule, error) {
	e, err := s.rules.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return Rule{}, fmt.Errorf("%w: %q", ErrNoRule, key)
	}
	if err != nil {
		return Rule{}, fmt.Errorf("reading the limit rule %q: %w", key, err)
	}
	r, err := Decode(key, e.Value())
	if err != nil {
		return Rule{}, storedError(key, e.Value(), err)
	}
	return r, nil
}

// storedError reports a stored rule that Decode refused as the invalid
// document it is (spool.ErrInvalidDocument, and ErrInvalidRule still),
// with the field and byte offset of a JSON error.
func storedError(key string, data []byte, err error) error {
	de := &spool.DocumentError{Kind: "limits rule", Key: key, Offset: -1, Err: err}
	var probe Rule
	var found *spool.DocumentError
	if errors.As(spool.DecodeDocument(de.Kind, key, data, &probe), &found) {
		de.Field, de.Offset = found.Field, found.Offset
	}
	return de
}

// List returns every valid rule: exact types first by type, then the
// patterns most precise first (Set.Rules).
func (s *Store) List(ctx context.Context) ([]Rule, error) {
	set, err := s.Rules(ctx)
	if err != nil {
		return nil, err
	}
	return set.Rules(), nil
}

// Rules reads every valid rule into a Set.
func (s *Store) Rules(ctx context.Context) (*Set, error) {
	lister, err := s.rules.ListKeys(ctx)
	if err != nil {
		return nil, fmt.Errorf("listing limit rules: %w", err)
	}
	set := &Set{}
	for k := range lister.Keys() {
		r, err := s.get(ctx, k)
		if errors.Is(err, ErrNoRule) {
			continue // deleted meanwhile
		}
		if err != nil {
			return nil, err
		}
		set.Put(r)
	}
	return set, nil
}

// Resolve returns the rule that governs typ, as stored (its Type is typ or
// the winning pattern), or ErrNoRule.
func (s *Store) Resolve(ctx context.Context, typ string) (Rule, error) {
	if err := spool.ValidateType(typ); err != nil {
		return Rule{}, fmt.Errorf("%w: type: %w", ErrInvalidRule, err)
	}
	set, err := s.Rules(ctx)
	if err != nil {
		return Rule{}, err
	}
	r, ok := set.Match(typ)
	if !ok {
		return Rule{}, fmt.Errorf("%w: %q", ErrNoRule, typ)
	}
	return r, nil
}

// BusiestKeys is how many keys Usage.Busiest lists.
const BusiestKeys = 5

// Usage is one rule and its use across the fleet now, read from the
// leases bucket (the slots held and the rate limits' state). The row of a
// pattern rule sums the slots of the types it governs, each of which has a
// row of its own after it (Via).
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
	// Waiting is the tasks of the type waiting in its concurrency limits'
	// waiting rooms (the type's and every key's; see Room).
	Waiting int `json:"waiting,omitempty"`
	// Rate is the state of the type-wide rate limit (nil without one, and
	// on a pattern rule's row: each type has its own).
	Rate *RateUsage `json:"rate_usage,omitempty"`
	// Via, on the row of a type a pattern rule governs, is that pattern
	// (Rule is then the pattern's rule with Type the type).
	Via string `json:"via,omitempty"`
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
// count until their TTL runs out. A pattern rule's row is followed by a
// row for each type it governs that holds leases now (Usage.Via); the
// pattern's row sums their slots.
func (s *Store) Usage(ctx context.Context) ([]Usage, error) {
	set, err := s.Rules(ctx)
	if err != nil {
		return nil, err
	}
	rules := set.Rules()
	out := make([]Usage, 0, len(rules))
	for _, r := range rules {
		if !IsPattern(r.Type) {
			u, err := s.typeUsage(ctx, r)
			if err != nil {
				return nil, err
			}
			out = append(out, u)
			continue
		}
		types, err := s.leaseTypes(ctx, r.Type, set)
		if err != nil {
			return nil, err
		}
		sum := Usage{Rule: r}
		var rows []Usage
		for _, typ := range types {
			u, err := s.typeUsage(ctx, r.For(typ))
			if err != nil {
				return nil, err
			}
			u.Via = r.Type
			sum.Running += u.Running
			sum.KeysRunning += u.KeysRunning
			sum.KeysActive += u.KeysActive
			sum.Waiting += u.Waiting
			rows = append(rows, u)
		}
		out = append(append(out, sum), rows...)
	}
	return out, nil
}

// typeUsage counts the leases of one type under r (r.Type is the type).
func (s *Store) typeUsage(ctx context.Context, r Rule) (Usage, error) {
	u := Usage{Rule: r}
	lister, err := s.leases.ListKeysFiltered(ctx, slotFilter(r.Type, ""), keySlotFilter(r.Type))
	if err != nil {
		return Usage{}, fmt.Errorf("listing leases of %q: %w", r.Type, err)
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
			return Usage{}, err
		}
	}
	if u.Waiting, err = s.waiting(ctx, r); err != nil {
		return Usage{}, err
	}
	return u, nil
}

// leaseTypes returns the types that hold slots or rate state now under
// the pattern rule named pattern (those set resolves to it), by type.
func (s *Store) leaseTypes(ctx context.Context, pattern string, set *Set) ([]string, error) {
	filter := func(prefix, suffix string) string {
		if strings.HasSuffix(pattern, ">") {
			return prefix + pattern
		}
		return prefix + pattern + suffix
	}
	lister, err := s.leases.ListKeysFiltered(ctx, filter("c.", ".*"), filter("kc.", ".*.*"), filter("r.", ""))
	if err != nil {
		return nil, fmt.Errorf("listing leases of %q: %w", pattern, err)
	}
	seen := map[string]bool{}
	for k := range lister.Keys() {
		typ, _, _, ok := ParseSlotKey(k)
		if !ok {
			typ, ok = strings.CutPrefix(k, "r.")
		}
		if !ok || seen[typ] {
			continue
		}
		if r, ok := set.Match(typ); ok && r.Type == pattern {
			seen[typ] = true
		}
	}
	out := make([]string, 0, len(seen))
	for typ := range seen {
		out = append(out, typ)
	}
	sort.Strings(out)
	return out, nil
}

// waiting counts the tasks in the waiting rooms of r's concurrency limits,
// from the task stream's subject counts (one request per limit).
func (s *Store) waiting(ctx context.Context, r Rule) (int, error) {
	if s.tasks == nil {
		return 0, nil
	}
	n := 0
	count := func(filter string, room func(subject string) bool) error {
		info, err := s.tasks.Info(ctx, jetstream.WithSubjectFilter(filter))
		if err != nil {
			return fmt.Errorf("counting the tasks waiting for a slot of %q: %w", r.Type, err)
		}
		for subj, c := range info.State.Subjects {
			if room(subj) {
				n += int(c)
			}
		}
		return nil
	}
	// Also after a limit was lowered to 0 the rooms may hold tasks until
	// the next sweep: count them while a rule is stored.
	if err := count(Room(s.names, r.Type, ""), func(string) bool { return true }); err != nil {
		return 0, err
	}
	if r.KeyConcurrency > 0 || len(r.Keys) > 0 {
		err := count(s.names.HeldSubject("*", r.Type), func(subj string) bool {
			token, typ, err := s.names.ParseHeldSubject(subj)
			key, ok := ParseRoomToken(token)
			return err == nil && typ == r.Type && ok && key != ""
		})
		if err != nil {
			return 0, err
		}
	}
	return n, nil
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
