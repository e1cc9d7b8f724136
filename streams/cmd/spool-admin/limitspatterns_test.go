package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// limits set takes a type pattern and key patterns from flags or a JSON
// file; ls shows the pattern rules; explain tells which rule governs a
// type and which limits a key has; bad patterns get one-line errors.
func TestLimitsPatterns(t *testing.T) {
	_, admin := startAdmin(t)
	if _, err := admin("provision"); err != nil {
		t.Fatal(err)
	}
	if _, err := admin("limits", "set", "--type", "email.*", "--concurrency", "5", "--key-concurrency", "1",
		"--key-limit", "vip-*=concurrency=3,rate=10/1s", "--key-limit", "free-*=rate=1/1m"); err != nil {
		t.Fatal(err)
	}
	doc := filepath.Join(t.TempDir(), "rule.json")
	if err := os.WriteFile(doc, []byte(`{"type":"email.bulk","concurrency":1}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := admin("limits", "set", "--file", doc); err != nil {
		t.Fatal(err)
	}
	out, err := admin("limits", "ls")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"email.bulk", "email.* (pattern: each type on its own)", "vip-*: concurrency 3, rate 10/1s"} {
		if !strings.Contains(out, want) {
			t.Errorf("limits ls lacks %q:\n%s", want, out)
		}
	}
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"email.send", "vip-7"}, []string{"governed by the pattern rule email.*", `key "vip-7": concurrency 3, rate 10/1s (from key pattern "vip-*")`}},
		{[]string{"email.send", "acme"}, []string{`key "acme": concurrency 1, rate - (from the rule's key_concurrency and key_rate)`}},
		{[]string{"email.bulk"}, []string{"email.bulk: governed by its own rule", "concurrency 1,"}},
		{[]string{"sms.send"}, []string{"no rule matches"}},
	} {
		out, err := admin(append([]string{"limits", "explain"}, tc.args...)...)
		if err != nil {
			t.Fatalf("explain %v: %v", tc.args, err)
		}
		for _, want := range tc.want {
			if !strings.Contains(out, want) {
				t.Errorf("explain %v lacks %q:\n%s", tc.args, want, out)
			}
		}
	}
	if _, err := admin("limits", "rm", "email.*"); err != nil {
		t.Fatal(err)
	}
	if out, _ := admin("limits", "explain", "email.send"); !strings.Contains(out, "no rule matches") {
		t.Errorf("explain after rm email.*:\n%s", out)
	}
	for _, tc := range []struct {
		args    []string
		wantErr string
	}{
		{[]string{"set", "--type", "email.>.x", "--concurrency", "1"}, "only the last token may be >"},
		{[]string{"set", "--type", "email.s*", "--concurrency", "1"}, "a wildcard is a whole token"},
		{[]string{"set", "--type", "t", "--key-limit", "vip-*-eu=concurrency=1"}, "has a * before its end"},
		{[]string{"set", "--type", "t", "--key-limit", "vip"}, "want PATTERN=LIMITS"},
		{[]string{"set", "--type", "t", "--key-limit", "vip=speed=3"}, `"speed=3" is not concurrency=N`},
		{[]string{"set", "--file", doc, "--concurrency", "2"}, "--file holds the whole rule: drop --concurrency"},
		{[]string{"rm", "email.>.x"}, "only the last token may be >"},
		{[]string{"explain"}, "a task type and an optional key"},
	} {
		if _, err := admin(append([]string{"limits"}, tc.args...)...); err == nil || !strings.Contains(err.Error(), tc.wantErr) {
			t.Errorf("limits %v: %v, want an error with %q", tc.args, err, tc.wantErr)
		}
	}
}
