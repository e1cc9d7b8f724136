package spool_test

import (
	"testing"

	spool "github.com/spoolq/spool/shared"
)

func TestTypeConsumerRoundTrip(t *testing.T) {
	n := spool.DefaultNames()
	for _, pattern := range []string{"email.send", "email.*", "email.>", ">", "a_b-c.d", "*.x"} {
		name := n.TypeConsumer(spool.High, pattern)
		p, got, ok := n.ParseTypeConsumer(name)
		if !ok || p != spool.High || got != pattern {
			t.Errorf("ParseTypeConsumer(%q) = %v %q %v, want high %q", name, p, got, ok, pattern)
		}
	}
	if got := n.TypeConsumer(spool.Normal, "email.*"); got != "spool-normal-email~+" {
		t.Errorf("TypeConsumer = %q", got)
	}
	for _, name := range []string{"spool-high", "spool-dlq-router", "spool-high-a~~b", "other-high-x"} {
		if _, _, ok := n.ParseTypeConsumer(name); ok {
			t.Errorf("ParseTypeConsumer(%q) accepted a name that is no type consumer", name)
		}
	}
}

func TestPatternsOverlap(t *testing.T) {
	cases := []struct {
		a, b string
		want bool
	}{
		{"a.b", "a.b", true},
		{"a.b", "a.c", false},
		{"a.*", "a.c", true},
		{"a.*", "a.c.d", false},
		{"a.>", "a.c.d", true},
		{"a.>", "a", false},
		{">", "x", true},
		{"*.b", "a.*", true},
		{"a", "a.b", false},
	}
	for _, c := range cases {
		if got := spool.PatternsOverlap(c.a, c.b); got != c.want {
			t.Errorf("PatternsOverlap(%q, %q) = %v, want %v", c.a, c.b, got, c.want)
		}
		if got := spool.PatternsOverlap(c.b, c.a); got != c.want {
			t.Errorf("PatternsOverlap(%q, %q) = %v, want %v", c.b, c.a, got, c.want)
		}
	}
	if err := spool.ValidateTypePatterns([]string{"a.b", "a.*"}); err == nil {
		t.Error("ValidateTypePatterns accepted overlapping patterns")
	}
	if err := spool.ValidateTypePatterns([]string{"a.b", "c.*", "d.>"}); err != nil {
		t.Errorf("ValidateTypePatterns: %v", err)
	}
}

func TestPatternCovers(t *testing.T) {
	cases := []struct {
		a, b string
		want bool
	}{
		{"a.*", "a.b", true},
		{"a.b", "a.*", false},
		{"a.>", "a.b.c", true},
		{"a.>", "a.*", true},
		{"a.*", "a.>", false},
		{">", "x.y", true},
		{"a.b", "a.b", true},
		{"a.*", "a.b.c", false},
		{"*.b", "a.*", false},
	}
	for _, c := range cases {
		if got := spool.PatternCovers(c.a, c.b); got != c.want {
			t.Errorf("PatternCovers(%q, %q) = %v, want %v", c.a, c.b, got, c.want)
		}
	}
}
