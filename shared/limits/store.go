package limits

import (
	"context"
	"errors"
	"fmt"
	"sort"

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

// Usage is the concurrency slots in use for one rule: slots held across the
// fleet now.
type Usage struct {
	Rule Rule `json:"rule"`
	// Running is the type-wide slots held (tasks of the type running
	// under its concurrency limit).
	Running int `json:"running"`
	// KeysRunning is the per-key slots held, and KeysActive the number of
	// keys holding at least one.
	KeysRunning int `json:"keys_running"`
	KeysActive  int `json:"keys_active"`
}

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
		keys := map[string]bool{}
		for k := range lister.Keys() {
			typ, enc, _, ok := ParseSlotKey(k)
			if !ok || typ != r.Type {
				continue
			}
			if enc == "" {
				u.Running++
			} else {
				u.KeysRunning++
				keys[enc] = true
			}
		}
		u.KeysActive = len(keys)
		out = append(out, u)
	}
	return out, nil
}
