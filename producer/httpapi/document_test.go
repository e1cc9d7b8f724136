package httpapi_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/spoolq/spool/producer/httpapi"
	"github.com/spoolq/spool/streams/embedded"
)

// A stored document the broker cannot decode, here NaN that a worker in
// another language wrote, answers 502 invalid_document naming the field,
// not 503 unavailable: the server answered, the document is at fault.
func TestInvalidStoredDocument(t *testing.T) {
	t.Parallel()
	b := startBroker(t, embedded.Options{}, httpapi.Options{})
	ctx := ctxFor(t)
	plant := func(bucket, key, doc string) {
		t.Helper()
		kv, err := b.js.KeyValue(ctx, bucket)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := kv.PutString(ctx, key, doc); err != nil {
			t.Fatal(err)
		}
	}
	plant("spool_results", "nan1", `{"id":"nan1","type":"a","priority":"normal","state":"completed","attempts":1,"result":NaN,"enqueued_at":"2026-01-01T00:00:00Z"}`)
	plant("spool_workflows", "wf1.wf", `{"id":"wf1","state":"running","steps":Infinity}`)
	plant("spool_limits", "img.resize", `{"type":"img.resize","max_concurrency":NaN}`)
	for _, tc := range []struct{ method, path, key, field string }{
		{"GET", "/v1/tasks/nan1", "nan1", "result"},
		{"GET", "/v1/tasks/nan1?wait=5s", "nan1", "result"},
		{"GET", "/v1/tasks/nan1/result", "nan1", "result"},
		{"DELETE", "/v1/tasks/nan1", "nan1", "result"},
		{"GET", "/v1/workflows/wf1", "wf1.wf", "steps"},
		{"GET", "/v1/limits/img.resize", "img.resize", "max_concurrency"},
	} {
		resp := b.do(t, tc.method, tc.path, "", nil)
		code, field, _ := resp.errorCode()
		if resp.status != http.StatusBadGateway || code != httpapi.CodeInvalidDocument || field != tc.field ||
			!strings.Contains(string(resp.body), `\"`+tc.key+`\"`) {
			t.Errorf("%s %s: %d %s, want 502 invalid_document with field %q naming %q", tc.method, tc.path, resp.status, resp.body, tc.field, tc.key)
		}
	}
}
