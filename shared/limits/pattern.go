package limits

import (
	"fmt"
	"sort"
	"strings"

	spool "github.com/spoolq/spool/shared"
)

// Type patterns. A rule names a task type ("email.send") or a type
// pattern: a type whose tokens may be "*" (any one token) and whose last
// token may be ">" (one or more tokens), as NATS subject wildcards
// ("email.*", "email.>", ">"). A pattern rule is a template: every type it
// matches gets limits of its own, counted under that type's lease keys,
// exactly as if the rule were stored under the type. One rule applies to
// a task type, the most precise one (Precedes); the limits of several
// matching rules never combine.
//
// KV keys cannot hold "*" or ">", so a pattern is stored under its tokens
// with "*" written PatternAny and ">" written PatternRest; no task type
// has a token starting with "=", so the two namespaces never meet. An
// exact type is stored under itself, as it always was.

// The KV key tokens that stand for the wildcards of a type pattern.
const (
	PatternAny  = "=any" // "*": any one token
	PatternRest = "=all" // ">": one or more tokens, last
)

// IsPattern reports whether name (a rule's Type) is a type pattern rather
// than an exact type.
func IsPattern(name string) bool {
	for tok := range strings.SplitSeq(name, ".") {
		if tok == "*" || tok == ">" {
			return true
		}
	}
	return false
}

// ValidateName checks the Type of a rule: a task type or a type pattern.
func ValidateName(name string) error {
	if len(name) > spool.MaxTypeLen {
		return fmt.Errorf("%w: %d characters, at most %d", spool.ErrInvalidType, len(name), spool.MaxTypeLen)
	}
	if !strings.ContainsAny(name, "*>") {
		return spool.ValidateType(name)
	}
	toks := strings.Split(name, ".")
	for i, tok := range toks {
		switch {
		case tok == "*", tok == ">" && i == len(toks)-1:
		case tok == ">":
			return fmt.Errorf("%w: pattern %q: > stands for the rest of a type, so only the last token may be >", spool.ErrInvalidType, name)
		case strings.ContainsAny(tok, "*>"):
			return fmt.Errorf("%w: pattern %q: token %q: a wildcard is a whole token (email.*, email.>)", spool.ErrInvalidType, name, tok)
		default:
			if err := spool.ValidateType(tok); err != nil {
				return fmt.Errorf("pattern %q: %w", name, err)
			}
		}
	}
	return nil
}

// RuleKey is the limits-bucket key of the rule named name (a task type or
// a valid type pattern): the type itself, or the pattern with its
// wildcards written PatternAny and PatternRest ("email.*" → "email.=any",
// ">" → "=all").
func RuleKey(name string) string {
	if !IsPattern(name) {
		return name
	}
	toks := strings.Split(name, ".")
	for i, tok := range toks {
		switch tok {
		case "*":
			toks[i] = PatternAny
		case ">":
			toks[i] = PatternRest
		}
	}
	return strings.Join(toks, ".")
}

// RuleName maps a limits-bucket key back to the type or pattern its rule
// names, and checks it.
func RuleName(key string) (string, error) {
	toks := strings.Split(key, ".")
	for i, tok := range toks {
		switch {
		case tok == PatternAny:
			toks[i] = "*"
		case tok == PatternRest:
			toks[i] = ">"
		case strings.HasPrefix(tok, "="):
			return "", fmt.Errorf("%w: key %q: token %q is neither %s (*) nor %s (>)", ErrInvalidRule, key, tok, PatternAny, PatternRest)
		}
	}
	name := strings.Join(toks, ".")
	if err := ValidateName(name); err != nil {
		if name == key {
			return "", fmt.Errorf("%w: type: %w", ErrInvalidRule, err)
		}
		return "", fmt.Errorf("%w: key %q: %w", ErrInvalidRule, key, err)
	}
	return name, nil
}

// Precedes reports whether the rule named a is more precise than the one
// named b, for a type both match. An exact type precedes every pattern;
// among patterns, more literal tokens precede fewer ("email.*.eu" before
// "email.*"), then a pattern without ">" precedes one with it ("email.*"
// before "email.>"), then, token by token from the left, a literal token
// precedes "*" and "*" precedes ">" ("email.*" before "*.send"), and last
// the byte order of the names, so the order is total.
func Precedes(a, b string) bool {
	pa, pb := IsPattern(a), IsPattern(b)
	if pa != pb {
		return !pa
	}
	ta, tb := strings.Split(a, "."), strings.Split(b, ".")
	if la, lb := literals(ta), literals(tb); la != lb {
		return la > lb
	}
	if ra, rb := ta[len(ta)-1] == ">", tb[len(tb)-1] == ">"; ra != rb {
		return !ra
	}
	for i := 0; i < len(ta) && i < len(tb); i++ {
		if wa, wb := wildness(ta[i]), wildness(tb[i]); wa != wb {
			return wa < wb
		}
	}
	return a < b
}

func literals(toks []string) int {
	n := 0
	for _, t := range toks {
		if t != "*" && t != ">" {
			n++
		}
	}
	return n
}

// wildness orders tokens: literal, "*", ">".
func wildness(tok string) int {
	switch tok {
	case "*":
		return 1
	case ">":
		return 2
	}
	return 0
}

// Set is the rules of a deployment in force, by the type or pattern they
// name, and answers which one governs a task type. Not safe for
// concurrent use.
type Set struct {
	exact map[string]Rule
	// patterns, most precise first (Precedes).
	patterns []Rule
	// resolved caches Match by type; reset by every change.
	resolved map[string]*Rule
}

// maxResolved bounds Set's cache of resolved types.
const maxResolved = 10_000

// Put adds r, replacing the rule of the same name.
func (s *Set) Put(r Rule) {
	s.Delete(r.Type)
	if !IsPattern(r.Type) {
		if s.exact == nil {
			s.exact = map[string]Rule{}
		}
		s.exact[r.Type] = r
		return
	}
	i := sort.Search(len(s.patterns), func(i int) bool { return Precedes(r.Type, s.patterns[i].Type) })
	s.patterns = append(s.patterns, Rule{})
	copy(s.patterns[i+1:], s.patterns[i:])
	s.patterns[i] = r
}

// Delete removes the rule named name, if any.
func (s *Set) Delete(name string) {
	s.resolved = nil
	if !IsPattern(name) {
		delete(s.exact, name)
		return
	}
	for i, p := range s.patterns {
		if p.Type == name {
			s.patterns = append(s.patterns[:i], s.patterns[i+1:]...)
			return
		}
	}
}

// Match returns the rule that governs typ, as stored (its Type is typ or
// the pattern that won; see Rule.For), and whether there is one: the
// rule stored under typ, else the most precise pattern matching it.
func (s *Set) Match(typ string) (Rule, bool) {
	if r, ok := s.exact[typ]; ok {
		return r, true
	}
	if len(s.patterns) == 0 {
		return Rule{}, false
	}
	if r, ok := s.resolved[typ]; ok {
		if r == nil {
			return Rule{}, false
		}
		return *r, true
	}
	var found *Rule
	for i := range s.patterns {
		if spool.MatchType(s.patterns[i].Type, typ) {
			found = &s.patterns[i]
			break
		}
	}
	if s.resolved == nil || len(s.resolved) >= maxResolved {
		s.resolved = map[string]*Rule{}
	}
	s.resolved[typ] = found
	if found == nil {
		return Rule{}, false
	}
	return *found, true
}

// Rules returns every rule, exact types first by type, then the patterns
// most precise first.
func (s *Set) Rules() []Rule {
	out := make([]Rule, 0, len(s.exact)+len(s.patterns))
	for _, r := range s.exact {
		out = append(out, r)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Type < out[j].Type })
	return append(out, s.patterns...)
}

// For returns the rule as it applies to typ, a type it governs: the same
// limits with Type typ, so its leases are counted under typ.
func (r Rule) For(typ string) Rule {
	r.Type = typ
	return r
}
