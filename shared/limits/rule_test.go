package limits_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/spoolq/spool/shared/limits"
)

func TestDecodeValidates(t *testing.T) {
	for _, tc := range []struct {
		doc, wantErr string
	}{
		{`{"concurrency":5,"rate":{"limit":100,"period":"1s","burst":10},"key_concurrency":1,"key_rate":{"limit":10,"period":"1m"}}`, ""},
		{`{"type":"email.send","concurrency":5}`, ""},
		{`{"type":"other","concurrency":5}`, `names type "other"`},
		{`{"concurrency":-1}`, "concurrency -1 must be 0 (no limit) to 100000"},
		{`{"key_concurrency":100001}`, "key_concurrency 100001"},
		{`{"rate":{"limit":0,"period":"1s"}}`, "rate.limit 0 must be at least 1"},
		{`{"rate":{"limit":1,"period":"soon"}}`, `period "soon" is not a Go duration`},
		{`{"key_rate":{"limit":1,"period":"48h"}}`, "key_rate.period 48h0m0s must be 1ms to 24h"},
		{`{"rate":{"limit":10,"period":"1s","burst":11}}`, "rate.burst 11 must be 0 to the limit (10)"},
		{`{"rate":{"limit":2000000,"period":"1s"}}`, "above 1,000,000 per second"},
		{`{"concurency":1}`, `unknown field "concurency"`},
		{`{"ordered":"hold"}`, ""},
		{`{"ordered":"skip","key_concurrency":2}`, ""},
		{`{"ordered":"strict"}`, `ordered "strict" must be "hold", "skip" or empty`},
		{`{"fair":{}}`, ""},
		{`{"fair":{"window":5,"weights":{"vip-*":4,"acme":2}}}`, ""},
		{`{"fair":{"window":1001}}`, "fair.window 1001 must be 0 (default 10) to 1000"},
		{`{"fair":{"weights":{"acme":0}}}`, `fair.weights["acme"] 0 must be 1 to 100`},
		{`{"fair":{"weights":{"":2}}}`, "a key pattern is empty"},
	} {
		r, err := limits.Decode("email.send", []byte(tc.doc))
		if tc.wantErr == "" {
			if err != nil || r.Type != "email.send" {
				t.Errorf("%s: %+v, %v", tc.doc, r, err)
			}
			continue
		}
		if err == nil || !errors.Is(err, limits.ErrInvalidRule) || !strings.Contains(err.Error(), tc.wantErr) {
			t.Errorf("%s: error %v, want ErrInvalidRule with %q", tc.doc, err, tc.wantErr)
		}
	}
	r, err := limits.Decode("email.send", []byte(`{"rate":{"limit":100,"period":"1s"}}`))
	if err != nil || r.Rate.Interval() != 10*time.Millisecond || r.Rate.BurstOrOne() != 1 {
		t.Errorf("rate %+v, %v: want one start every 10ms, burst 1", r.Rate, err)
	}
	if err := (limits.Rule{Type: "bad type!"}).Validate(); err == nil {
		t.Error("an invalid type was accepted")
	}
}

func TestSlotKeys(t *testing.T) {
	for _, tc := range []struct {
		typ, key string
		i        int
		want     string
	}{
		{"email.send", "", 3, "c.email.send.3"},
		{"email.send", "customer:42", 0, "kc.email.send.Y3VzdG9tZXI6NDI.0"},
	} {
		k := limits.SlotKey(tc.typ, tc.key, tc.i)
		if k != tc.want {
			t.Errorf("SlotKey(%q, %q, %d) = %q, want %q", tc.typ, tc.key, tc.i, k, tc.want)
		}
		typ, enc, i, ok := limits.ParseSlotKey(k)
		if !ok || typ != tc.typ || enc != limits.EncodeKey(tc.key) && tc.key != "" || i != tc.i {
			t.Errorf("ParseSlotKey(%q) = %q %q %d %v", k, typ, enc, i, ok)
		}
	}
	for _, bad := range []string{"r.email.send", "c.email.x", "kc.email", "c.", "q.email.send"} {
		if _, _, _, ok := limits.ParseSlotKey(bad); ok {
			t.Errorf("ParseSlotKey(%q) accepted a key that is no slot", bad)
		}
	}
}

func TestKeyWindow(t *testing.T) {
	fair := limits.Rule{Fair: &limits.Fair{Window: 5, Weights: map[string]int{"vip-*": 4, "vip-gold-*": 10, "acme": 2}}}
	for _, tc := range []struct {
		rule limits.Rule
		key  string
		want int
	}{
		{limits.Rule{Concurrency: 3}, "k", 0},
		{limits.Rule{Ordered: limits.OrderHold}, "k", 1},
		{limits.Rule{Ordered: limits.OrderSkip, Fair: &limits.Fair{Window: 9}}, "k", 1},
		{limits.Rule{Ordered: limits.OrderHold}, "", 0},
		{limits.Rule{Fair: &limits.Fair{}}, "k", limits.DefaultFairWindow},
		{fair, "other", 5},
		{fair, "acme", 10},
		{fair, "acme-2", 5},
		{fair, "vip-1", 20},
		{fair, "vip-gold-1", 50},
		{limits.Rule{Fair: &limits.Fair{Window: 1000, Weights: map[string]int{"*": 100}}}, "k", limits.MaxFairWindow},
	} {
		if got := tc.rule.KeyWindow(tc.key); got != tc.want {
			t.Errorf("%+v key %q: window %d, want %d", tc.rule, tc.key, got, tc.want)
		}
	}
}
