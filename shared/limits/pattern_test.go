package limits_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/spoolq/spool/shared/limits"
)

func TestRuleKeys(t *testing.T) {
	for _, tc := range []struct{ name, key string }{
		{"email.send", "email.send"},
		{"email.*", "email.=any"},
		{"email.>", "email.=all"},
		{">", "=all"},
		{"*.send.*", "=any.send.=any"},
		{"*", "=any"},
	} {
		if got := limits.RuleKey(tc.name); got != tc.key {
			t.Errorf("RuleKey(%q) = %q, want %q", tc.name, got, tc.key)
		}
		if got, err := limits.RuleName(tc.key); err != nil || got != tc.name {
			t.Errorf("RuleName(%q) = %q, %v; want %q", tc.key, got, err, tc.name)
		}
	}
	for _, tc := range []struct{ key, wantErr string }{
		{"email.=star", `token "=star" is neither =any (*) nor =all (>)`},
		{"=all.email", "only the last token may be >"},
		{"email..send", "empty token"},
	} {
		_, err := limits.RuleName(tc.key)
		if !errors.Is(err, limits.ErrInvalidRule) || !strings.Contains(err.Error(), tc.wantErr) {
			t.Errorf("RuleName(%q): %v, want ErrInvalidRule with %q", tc.key, err, tc.wantErr)
		}
	}
}

func TestValidateName(t *testing.T) {
	for _, ok := range []string{"email.send", "email.*", "email.>", ">", "*.send"} {
		if err := limits.ValidateName(ok); err != nil {
			t.Errorf("ValidateName(%q): %v", ok, err)
		}
	}
	for _, tc := range []struct{ name, wantErr string }{
		{"email.>.x", "only the last token may be >"},
		{"email.s*", `token "s*": a wildcard is a whole token`},
		{"email.", "empty token"},
		{"", "empty"},
		{strings.Repeat("a.", 101) + "*", "at most 200"},
	} {
		err := limits.ValidateName(tc.name)
		if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
			t.Errorf("ValidateName(%q): %v, want %q", tc.name, err, tc.wantErr)
		}
	}
}

// TestPrecedence is the table of which rule governs a type.
func TestPrecedence(t *testing.T) {
	var set limits.Set
	for _, name := range []string{">", "email.>", "email.*", "*.send", "email.*.eu", "email.send", "*.*", "email.*.>", "sms.*"} {
		set.Put(limits.Rule{Type: name, Concurrency: 1})
	}
	for _, tc := range []struct{ typ, want string }{
		{"email.send", "email.send"},      // exact beats every pattern
		{"email.bounce", "email.*"},       // literal tokens, then * beats >
		{"push.send", "*.send"},           // one literal beats *.*
		{"push.bounce", "*.*"},            // * beats >
		{"email.bounce.eu", "email.*.eu"}, // two literals
		{"email.bounce.us", "email.*.>"},  // the * before > is more precise than email.>
		{"email.a.b.c", "email.*.>"},
		{"report", ">"},
		{"sms.send", "sms.*"}, // sms.* before *.send: the literal comes first
	} {
		r, ok := set.Match(tc.typ)
		if !ok || r.Type != tc.want {
			t.Errorf("Match(%q) = %q, %v; want %q", tc.typ, r.Type, ok, tc.want)
		}
		if got := r.For(tc.typ); got.Type != tc.typ || got.Concurrency != 1 {
			t.Errorf("For(%q) = %+v", tc.typ, got)
		}
	}
	set.Delete(">")
	set.Delete("*.*")
	if r, ok := set.Match("report"); ok {
		t.Errorf("Match(report) after deleting > = %q, want none", r.Type)
	}
	if r, _ := set.Match("push.bounce"); r.Type != "" {
		t.Errorf("Match(push.bounce) after deleting *.* = %q, want none", r.Type)
	}
	set.Put(limits.Rule{Type: "email.*", Concurrency: 7})
	if r, _ := set.Match("email.bounce"); r.Concurrency != 7 {
		t.Errorf("a replaced pattern rule is not in force: %+v", r)
	}
	var names []string
	for _, r := range set.Rules() {
		names = append(names, r.Type)
	}
	if got := strings.Join(names, " "); got != "email.send email.*.eu email.* sms.* *.send email.*.> email.>" {
		t.Errorf("Rules() in order %q", got)
	}
	for _, tc := range []struct{ a, b string }{
		{"email.send", "email.*"}, {"email.*", "email.>"}, {"email.*", "*.send"}, {"*.*", ">"},
		{"a.*", "b.*"}, // the tie is broken by the names
	} {
		if !limits.Precedes(tc.a, tc.b) || limits.Precedes(tc.b, tc.a) {
			t.Errorf("Precedes(%q, %q) is not strict", tc.a, tc.b)
		}
	}
}

func TestKeyPatterns(t *testing.T) {
	rate := &limits.Rate{Limit: 10, Period: limits.Duration(1e9)}
	r := limits.Rule{KeyConcurrency: 2, KeyRate: rate, Keys: map[string]limits.KeyLimit{
		"vip-*":      {Concurrency: 10},
		"vip-gold-*": {Concurrency: 50},
		"vip-gold-1": {},
		"bad*":       {Concurrency: 1, Rate: &limits.Rate{Limit: 1, Period: limits.Duration(6e10)}},
	}}
	for _, tc := range []struct {
		key  string
		conc int
		rate bool
	}{
		{"acme", 2, true},    // no pattern: the default per-key limits
		{"vip-1", 10, false}, // a pattern replaces both limits
		{"vip-gold-2", 50, false},
		{"vip-gold-1", 0, false}, // the exact key: no per-key limit
		{"bad", 1, true},
		{"", 0, false},
	} {
		kl := r.KeyLimit(tc.key)
		if kl.Concurrency != tc.conc || (kl.Rate != nil) != tc.rate {
			t.Errorf("KeyLimit(%q) = %+v, want concurrency %d rate %v", tc.key, kl, tc.conc, tc.rate)
		}
		if f := r.ForKey(tc.key); tc.key != "" && (f.KeyConcurrency != tc.conc || (f.KeyRate != nil) != tc.rate) {
			t.Errorf("ForKey(%q) = %+v", tc.key, f)
		}
	}
	if !(limits.Rule{Keys: map[string]limits.KeyLimit{"vip-*": {Concurrency: 1}}}).Limits() {
		t.Error("a rule with key-pattern limits only limits nothing")
	}
	// The fair weights share the matcher: the key itself beats a longer prefix.
	f := limits.Fair{Weights: map[string]int{"acme": 2, "acme*": 3, "ac*": 4}}
	for key, want := range map[string]int{"acme": 2, "acme-1": 3, "acx": 4, "b": 1} {
		if got := f.Weight(key); got != want {
			t.Errorf("Weight(%q) = %d, want %d", key, got, want)
		}
	}
}

func TestDecodePatterns(t *testing.T) {
	for _, tc := range []struct{ key, doc, wantType, wantErr string }{
		{"email.=any", `{"concurrency":5}`, "email.*", ""},
		{"email.=any", `{"type":"email.*","concurrency":5}`, "email.*", ""},
		{"=all", `{"rate":{"limit":1,"period":"1s"}}`, ">", ""},
		{"email.=any", `{"type":"email.send","concurrency":5}`, "", `names type "email.send", not "email.*"`},
		{"email.send", `{"keys":{"vip-*":{"concurrency":3,"rate":{"limit":5,"period":"1s"}}}}`, "email.send", ""},
		{"email.send", `{"keys":{"vip-*-eu":{"concurrency":3}}}`, "", `key pattern "vip-*-eu" has a * before its end`},
		{"email.send", `{"keys":{"*":{"concurrency":3}}}`, "", `matches every key: set key_concurrency and key_rate instead`},
		{"email.send", `{"keys":{"":{}}}`, "", "a key pattern is empty"},
		{"email.send", `{"keys":{"vip":{"concurrency":-1}}}`, "", `keys["vip"].concurrency -1 must be 0`},
		{"email.send", `{"keys":{"vip":{"rate":{"limit":0,"period":"1s"}}}}`, "", `keys["vip"].rate.limit 0 must be at least 1`},
		{"email.send", `{"keys":{"vip":{"conc":1}}}`, "", `unknown field "conc"`},
	} {
		r, err := limits.Decode(tc.key, []byte(tc.doc))
		if tc.wantErr == "" {
			if err != nil || r.Type != tc.wantType {
				t.Errorf("Decode(%q, %s) = %+v, %v", tc.key, tc.doc, r, err)
			}
			continue
		}
		if !errors.Is(err, limits.ErrInvalidRule) || !strings.Contains(err.Error(), tc.wantErr) {
			t.Errorf("Decode(%q, %s): %v, want ErrInvalidRule with %q", tc.key, tc.doc, err, tc.wantErr)
		}
	}
}

// BenchmarkMatch is the cost of finding the rule of a type among 1 exact
// and 100 pattern rules: once per type (the scan), then cached.
func BenchmarkMatch(b *testing.B) {
	var set limits.Set
	set.Put(limits.Rule{Type: "email.send", Concurrency: 1})
	for i := range 100 {
		set.Put(limits.Rule{Type: fmt.Sprintf("t%d.*", i), Concurrency: 1})
	}
	set.Put(limits.Rule{Type: ">", Concurrency: 1})
	b.Run("cached", func(b *testing.B) {
		for b.Loop() {
			if r, _ := set.Match("other.type"); r.Type != ">" {
				b.Fatal(r.Type)
			}
		}
	})
	b.Run("scan", func(b *testing.B) {
		for b.Loop() {
			set.Delete("none") // resets the cache
			if r, _ := set.Match("other.type"); r.Type != ">" {
				b.Fatal(r.Type)
			}
		}
	})
}

// BenchmarkKeyLimit is the cost of a key's limits among 100 key patterns.
func BenchmarkKeyLimit(b *testing.B) {
	r := limits.Rule{KeyConcurrency: 1, Keys: map[string]limits.KeyLimit{}}
	for i := range 100 {
		r.Keys[fmt.Sprintf("tenant-%d-*", i)] = limits.KeyLimit{Concurrency: 2}
	}
	for b.Loop() {
		if kl := r.KeyLimit("tenant-42-x"); kl.Concurrency != 2 {
			b.Fatal(kl)
		}
	}
}

// MatchKey answers the same whether it scans a few patterns or looks up
// the prefixes of the key among many.
func TestMatchKeyManyPatterns(t *testing.T) {
	few := map[string]int{"acme": 1, "acme*": 2, "ac*": 3, "b*": 4}
	many := map[string]int{}
	for p, w := range few {
		many[p] = w
	}
	for i := range 40 {
		many[fmt.Sprintf("zz-%d-*", i)] = 9
	}
	for _, key := range []string{"acme", "acme-1", "acx", "b", "bee", "c", "", "zz-7-x", "a*"} {
		pf, okf := limits.MatchKey(few, key)
		pm, okm := limits.MatchKey(many, key)
		if key != "zz-7-x" && (pf != pm || okf != okm) {
			t.Errorf("MatchKey(%q): %q %v with few patterns, %q %v with many", key, pf, okf, pm, okm)
		}
	}
	if p, ok := limits.MatchKey(many, "zz-7-x"); !ok || p != "zz-7-*" {
		t.Errorf("MatchKey(zz-7-x) = %q, %v", p, ok)
	}
}
