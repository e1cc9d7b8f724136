package httpapi_test

import (
	"testing"

	"github.com/spoolq/spool/producer/httpapi"
	"github.com/spoolq/spool/shared/limits"
	"github.com/spoolq/spool/streams/embedded"
)

// Pattern rules are set and removed over HTTP under the pattern (with >
// percent-encoded) or its KV key; GET /v1/limits/{type} tells which rule
// governs a type and, with ?key=, the key's per-key limits; a bad pattern
// or key pattern is refused with a one-line reason.
func TestLimitPatternRoutes(t *testing.T) {
	t.Parallel()
	b := startBroker(t, embedded.Options{}, httpapi.Options{Token: "t"})
	for path, body := range map[string]string{
		"/v1/limits/email.*":     `{"concurrency":5,"key_concurrency":1,"keys":{"vip-*":{"concurrency":3}}}`,
		"/v1/limits/email.%3E":   `{"concurrency":9}`,
		"/v1/limits/email.bulk":  `{"concurrency":1}`,
		"/v1/limits/report.=any": `{"type":"report.*","rate":{"limit":1,"period":"1s"}}`,
	} {
		if r := b.do(t, "PUT", path, "t", []byte(body)); r.status != 200 {
			t.Fatalf("put %s: %d %s", path, r.status, r.body)
		}
	}
	type explained struct {
		Type string      `json:"type"`
		Rule limits.Rule `json:"rule"`
		Key  *struct {
			Key         string `json:"key"`
			Pattern     string `json:"pattern"`
			Concurrency int    `json:"concurrency"`
		} `json:"key"`
	}
	for _, tc := range []struct {
		path, rule, keyPattern string
		keyConc                int
	}{
		{"/v1/limits/email.send?key=vip-1", "email.*", "vip-*", 3},
		{"/v1/limits/email.send?key=acme", "email.*", "", 1},
		{"/v1/limits/email.a.b", "email.>", "", 0},
		{"/v1/limits/email.bulk", "email.bulk", "", 0},
		{"/v1/limits/report.daily", "report.*", "", 0},
		{"/v1/limits/email.=any", "email.*", "", 0},
	} {
		r := b.do(t, "GET", tc.path, "t", nil)
		if r.status != 200 {
			t.Errorf("get %s: %d %s", tc.path, r.status, r.body)
			continue
		}
		got := decode[explained](t, r)
		if got.Rule.Type != tc.rule || (got.Key != nil) != (tc.keyConc > 0) ||
			got.Key != nil && (got.Key.Pattern != tc.keyPattern || got.Key.Concurrency != tc.keyConc) {
			t.Errorf("get %s: %s", tc.path, r.body)
		}
	}
	if r := b.do(t, "GET", "/v1/limits/sms.send", "t", nil); r.status != 404 {
		t.Errorf("get a type no rule governs: %d %s", r.status, r.body)
	}
	for path, body := range map[string]string{
		"/v1/limits/email.%3E.x":  `{"concurrency":1}`,
		"/v1/limits/email.=star":  `{"concurrency":1}`,
		"/v1/limits/email.s*":     `{"concurrency":1}`,
		"/v1/limits/email.send":   `{"keys":{"vip-*-eu":{"concurrency":1}}}`,
		"/v1/limits/email.send/x": `{"concurrency":1}`,
	} {
		r := b.do(t, "PUT", path, "t", []byte(body))
		if code, _, _ := r.errorCode(); r.status != 400 && r.status != 404 || r.status == 400 && code != "invalid_limit" {
			t.Errorf("put %s %s: %d %s, want 400 invalid_limit", path, body, r.status, r.body)
		}
	}
	list := decode[struct {
		Limits []limits.Usage `json:"limits"`
	}](t, b.do(t, "GET", "/v1/limits", "t", nil))
	if len(list.Limits) != 4 {
		t.Errorf("list %+v, want the four rules", list.Limits)
	}
	for _, path := range []string{"/v1/limits/email.*", "/v1/limits/email.=all"} {
		if r := b.do(t, "DELETE", path, "t", nil); r.status != 204 {
			t.Errorf("delete %s: %d %s", path, r.status, r.body)
		}
	}
	if r := b.do(t, "GET", "/v1/limits/email.send", "t", nil); r.status != 404 {
		t.Errorf("get email.send after the patterns' removal: %d %s", r.status, r.body)
	}
}
