package httpapi_test

import (
	"strings"
	"testing"

	"github.com/spoolq/spool/producer/httpapi"
	"github.com/spoolq/spool/shared/workflow"
	"github.com/spoolq/spool/streams/embedded"
)

// The workflow routes: submit (then the first steps are queued), a clear
// 400 for an invalid document with nothing stored, 409 for an id used
// twice, status, list and cancel.
func TestWorkflowRoutes(t *testing.T) {
	t.Parallel()
	b := startBroker(t, embedded.Options{}, httpapi.Options{Token: "t"})
	doc := `{"version":1,"id":"wf1","on_error":"continue","steps":[
		{"name":"fetch","type":"demo.echo","payload":{"url":"x"}},
		{"name":"parse","type":"demo.echo","after":["fetch"],"inputs":true}]}`
	r := b.do(t, "POST", "/v1/workflows", "t", []byte(doc))
	if r.status != 201 || !strings.Contains(string(r.body), `"id":"wf1"`) {
		t.Fatalf("submit: %d %s", r.status, r.body)
	}
	if r := b.do(t, "POST", "/v1/workflows", "t", []byte(doc)); r.status != 409 || !strings.Contains(string(r.body), httpapi.CodeWorkflowExists) {
		t.Errorf("submit again: %d %s", r.status, r.body)
	}
	for _, bad := range []struct{ doc, want string }{
		{`{"steps":[{"name":"a","type":"t","after":["b"]},{"name":"b","type":"t","after":["a"]}]}`, "cycle"},
		{`{"steps":[{"name":"a","type":"t","after":["nope"]}]}`, `\"nope\", which is not a step`},
		{`{"steps":[{"name":"a","type":"t"},{"name":"a","type":"t"}]}`, "used twice"},
	} {
		r := b.do(t, "POST", "/v1/workflows", "t", []byte(bad.doc))
		if r.status != 400 || !strings.Contains(string(r.body), httpapi.CodeInvalidWorkflow) || !strings.Contains(string(r.body), bad.want) {
			t.Errorf("invalid document: %d %s, want 400 with %q", r.status, r.body, bad.want)
		}
	}
	st := decode[workflow.Status](t, b.do(t, "GET", "/v1/workflows/wf1", "t", nil))
	if st.State != workflow.Running || len(st.Steps) != 2 || st.Steps[0].State != workflow.Queued || st.Steps[1].State != workflow.Pending ||
		st.Steps[0].TaskID != workflow.StepTaskID("wf1", "fetch", 0) {
		t.Errorf("status %+v", st)
	}
	list := decode[struct{ Workflows []workflow.Summary }](t, b.do(t, "GET", "/v1/workflows", "t", nil))
	if len(list.Workflows) != 1 || list.Workflows[0].ID != "wf1" || list.Workflows[0].Total != 2 {
		t.Errorf("list %+v", list)
	}
	if r := b.do(t, "POST", "/v1/workflows/wf1/cancel", "t", nil); r.status != 200 || !strings.Contains(string(r.body), `"cancelled":true`) {
		t.Errorf("cancel: %d %s", r.status, r.body)
	}
	if r := b.do(t, "GET", "/v1/workflows/nope", "t", nil); r.status != 404 {
		t.Errorf("unknown workflow: %d %s", r.status, r.body)
	}
	if r := b.do(t, "GET", "/v1/workflows", "", nil); r.status != 401 {
		t.Errorf("without token: %d", r.status)
	}
}
