package httpapi_test

import (
	"strings"
	"testing"

	"github.com/spoolq/spool/producer/httpapi"
	"github.com/spoolq/spool/streams/embedded"
)

func TestPauseAndResumeOverHTTP(t *testing.T) {
	t.Parallel()
	b := startBroker(t, embedded.Options{}, httpapi.Options{Token: "tok"})
	checkRefusals(t, b, []refusal{
		{"no token", "/v1/priorities/high/pause", "", 401, "unauthorized"},
		{"bad priority", "/v1/priorities/urgent/pause", "tok", 400, "invalid_priority"},
		{"bad for", "/v1/priorities/high/pause?for=soon", "tok", 400, "invalid_pause"},
		{"past until", "/v1/priorities/high/pause?until=2001-01-01T00:00:00Z", "tok", 400, "invalid_pause"},
		{"both", "/v1/priorities/high/pause?for=1h&until=2999-01-01T00:00:00Z", "tok", 400, "invalid_pause"},
		{"bad priority on resume", "/v1/priorities/urgent/resume", "tok", 400, "invalid_priority"},
	})
	r := b.do(t, "POST", "/v1/priorities/high/pause?for=1h", "tok", nil)
	if r.status != 200 || !strings.Contains(string(r.body), `"paused":true`) {
		t.Fatalf("pause: %d %s", r.status, r.body)
	}
	r = b.do(t, "GET", "/v1/overview", "tok", nil)
	if r.status != 200 || strings.Count(string(r.body), `"paused":true`) != 1 {
		t.Fatalf("overview while paused: %d %s", r.status, r.body)
	}
	r = b.do(t, "POST", "/v1/priorities/high/resume", "tok", nil)
	if r.status != 200 || !strings.Contains(string(r.body), `"paused":false`) {
		t.Fatalf("resume: %d %s", r.status, r.body)
	}
	r = b.do(t, "GET", "/v1/overview", "tok", nil)
	if r.status != 200 || strings.Contains(string(r.body), `"paused":true`) {
		t.Fatalf("overview after resume: %d %s", r.status, r.body)
	}
}

func TestPauseAndResumeTypeOverHTTP(t *testing.T) {
	t.Parallel()
	b := startBroker(t, embedded.Options{}, httpapi.Options{Token: "tok"})
	checkRefusals(t, b, []refusal{
		{"no token", "/v1/types/email/pause", "", 401, "unauthorized"},
		{"bad type", "/v1/types/a..b/pause", "tok", 400, "invalid_type"},
		{"bad for", "/v1/types/email/pause?for=soon", "tok", 400, "invalid_pause"},
		{"past until", "/v1/types/email/pause?until=2001-01-01T00:00:00Z", "tok", 400, "invalid_pause"},
		{"bad type on resume", "/v1/types/a..b/resume", "tok", 400, "invalid_type"},
	})
	r := b.do(t, "POST", "/v1/types/email.send/pause?reason=smtp+down", "tok", nil)
	if r.status != 200 || !strings.Contains(string(r.body), `"paused":true`) || !strings.Contains(string(r.body), `"reason":"smtp down"`) {
		t.Fatalf("pause: %d %s", r.status, r.body)
	}
	r = b.do(t, "GET", "/v1/types", "tok", nil)
	if r.status != 200 || !strings.Contains(string(r.body), `"type":"email.send","paused":true`) {
		t.Fatalf("types while paused: %d %s", r.status, r.body)
	}
	r = b.do(t, "GET", "/v1/overview", "tok", nil)
	if r.status != 200 || !strings.Contains(string(r.body), `"type":"email.send","paused":true`) {
		t.Fatalf("overview while paused: %d %s", r.status, r.body)
	}
	r = b.do(t, "POST", "/v1/types/email.send/resume", "tok", nil)
	if r.status != 200 || !strings.Contains(string(r.body), `"paused":false`) {
		t.Fatalf("resume: %d %s", r.status, r.body)
	}
	r = b.do(t, "GET", "/v1/types", "tok", nil)
	if r.status != 200 || string(r.body) != "{\"types\":[]}\n" {
		t.Fatalf("types after resume: %d %q", r.status, r.body)
	}
}

// refusal is a POST the broker must refuse with status and code.
type refusal struct {
	name, path, token string
	status            int
	code              string
}

func checkRefusals(t *testing.T, b *broker, cases []refusal) {
	t.Helper()
	for _, tt := range cases {
		r := b.do(t, "POST", tt.path, tt.token, nil)
		if code, _, _ := r.errorCode(); r.status != tt.status || code != tt.code {
			t.Errorf("%s: %d %s, want %d %s", tt.name, r.status, r.body, tt.status, tt.code)
		}
	}
}
