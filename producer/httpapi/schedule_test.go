package httpapi_test

import (
	"strings"
	"testing"

	"github.com/spoolq/spool/producer/httpapi"
	"github.com/spoolq/spool/streams/embedded"
)

func TestSchedulesOverHTTP(t *testing.T) {
	t.Parallel()
	b := startBroker(t, embedded.Options{}, httpapi.Options{})
	r := b.do(t, "PUT", "/v1/schedules/digest", "", []byte(`{"spec":"@every 1h","type":"email.digest","priority":"low","payload":{"list":"weekly"},"max_retries":1}`))
	if r.status != 200 || !strings.Contains(string(r.body), `"payload":{"list":"weekly"}`) || !strings.Contains(string(r.body), `"next_run":`) {
		t.Fatalf("set: %d %s", r.status, r.body)
	}
	r = b.do(t, "GET", "/v1/schedules", "", nil)
	if r.status != 200 || !strings.Contains(string(r.body), `"name":"digest"`) || !strings.Contains(string(r.body), `"spec":"@every 1h0m0s"`) {
		t.Fatalf("list: %d %s", r.status, r.body)
	}
	r = b.do(t, "POST", "/v1/schedules/digest/pause", "", nil)
	if r.status != 200 || !strings.Contains(string(r.body), `"paused":true`) {
		t.Fatalf("pause: %d %s", r.status, r.body)
	}
	r = b.do(t, "POST", "/v1/schedules/digest/resume", "", nil)
	if r.status != 200 || !strings.Contains(string(r.body), `"paused":false`) {
		t.Fatalf("resume: %d %s", r.status, r.body)
	}
	r = b.do(t, "DELETE", "/v1/schedules/digest", "", nil)
	if r.status != 200 || !strings.Contains(string(r.body), `"deleted":true`) {
		t.Fatalf("delete: %d %s", r.status, r.body)
	}
	for _, tt := range []struct {
		method, path, body string
		status             int
		code, field        string
	}{
		{"DELETE", "/v1/schedules/digest", "", 404, "not_found", "name"},
		{"POST", "/v1/schedules/digest/pause", "", 404, "not_found", "name"},
		{"PUT", "/v1/schedules/x", `{"spec":"@every 10ms","type":"t"}`, 400, "invalid_schedule", "spec"},
		{"PUT", "/v1/schedules/a.b", `{"spec":"@daily","type":"t"}`, 400, "invalid_schedule", "name"},
		{"PUT", "/v1/schedules/x", `{"spec":"@daily","type":"t","priority":"urgent"}`, 400, "invalid_priority", "priority"},
		{"PUT", "/v1/schedules/x", `{"spec":"@daily","type":"bad type"}`, 400, "invalid_type", "type"},
		{"PUT", "/v1/schedules/x", `{"spec":"@daily","type":"t","cron":"x"}`, 400, "invalid_json", "cron"},
	} {
		r := b.do(t, tt.method, tt.path, "", []byte(tt.body))
		if code, field, _ := r.errorCode(); r.status != tt.status || code != tt.code || field != tt.field {
			t.Errorf("%s %s %s: %d %s", tt.method, tt.path, tt.body, r.status, r.body)
		}
	}
}
