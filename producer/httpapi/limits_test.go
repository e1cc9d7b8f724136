package httpapi_test

import (
	"testing"

	"github.com/spoolq/spool/producer/httpapi"
	"github.com/spoolq/spool/shared/limits"
	"github.com/spoolq/spool/streams/embedded"
)

// Rules are set, listed with their usage and removed over HTTP; a bad
// rule is refused with the field at fault and stores nothing.
func TestLimitRoutes(t *testing.T) {
	t.Parallel()
	b := startBroker(t, embedded.Options{}, httpapi.Options{Token: "t"})
	if r := b.do(t, "PUT", "/v1/limits/email.send", "", []byte(`{"concurrency":5}`)); r.status != 401 {
		t.Errorf("without the token: %d %s", r.status, r.body)
	}
	r := b.do(t, "PUT", "/v1/limits/email.send", "t", []byte(`{"concurrency":5,"key_rate":{"limit":10,"period":"1m"}}`))
	if r.status != 200 {
		t.Fatalf("put: %d %s", r.status, r.body)
	}
	if got := decode[limits.Rule](t, r); got.Type != "email.send" || got.Concurrency != 5 || got.KeyRate == nil || got.KeyRate.Interval().Seconds() != 6 {
		t.Errorf("put answered %+v", got)
	}
	for _, bad := range []struct{ body, want string }{
		{`{"concurrency":-1}`, "invalid_limit"},
		{`{"rate":{"limit":10,"period":"soon"}}`, "invalid_limit"},
		{`{"type":"other","concurrency":1}`, "invalid_limit"},
		{`{"concurency":1}`, "invalid_limit"},
		{`{`, "invalid_limit"},
	} {
		r := b.do(t, "PUT", "/v1/limits/email.send", "t", []byte(bad.body))
		if code, _, _ := r.errorCode(); r.status != 400 || code != bad.want {
			t.Errorf("put %s: %d %s, want 400 %s", bad.body, r.status, r.body, bad.want)
		}
	}
	list := decode[struct {
		Limits []limits.Usage `json:"limits"`
	}](t, b.do(t, "GET", "/v1/limits", "t", nil))
	if len(list.Limits) != 1 || list.Limits[0].Rule.Concurrency != 5 || list.Limits[0].Running != 0 {
		t.Errorf("list %+v, want the one rule, unchanged by the bad puts, nothing running", list)
	}
	if r := b.do(t, "DELETE", "/v1/limits/email.send", "t", nil); r.status != 204 {
		t.Errorf("delete: %d %s", r.status, r.body)
	}
	list = decode[struct {
		Limits []limits.Usage `json:"limits"`
	}](t, b.do(t, "GET", "/v1/limits", "t", nil))
	if len(list.Limits) != 0 {
		t.Errorf("after delete: %+v", list)
	}
	if r := b.do(t, "POST", "/v1/limits", "t", nil); r.status != 405 {
		t.Errorf("POST /v1/limits: %d", r.status)
	}
}
