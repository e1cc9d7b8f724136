package httpapi_test

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/spoolq/spool/producer"
	"github.com/spoolq/spool/producer/httpapi"
	spool "github.com/spoolq/spool/shared"
	"github.com/spoolq/spool/streams/admin"
	"github.com/spoolq/spool/streams/embedded"
)

func TestEnqueueOverHTTPStoresContract(t *testing.T) {
	t.Parallel()
	b := startBroker(t, embedded.Options{}, httpapi.Options{})
	ctx := ctxFor(t)
	body := `{"type":"email.send","priority":"high","payload":{"to": "a@example.com"},"id":"mail-1",
		"max_retries":2,"timeout":"30s","unique_key":"user-1","unique_ttl":"1h",
		"headers":{"X-Tenant":"acme"},"traceparent":"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}`
	r := b.do(t, "POST", "/v1/tasks", "", []byte(body))
	if r.status != 201 || r.header.Get("Location") != "/v1/tasks/mail-1" {
		t.Fatalf("status %d %s", r.status, r.body)
	}
	res := decode[producer.EnqueueResult](t, r)
	if res.ID != "mail-1" || res.Subject != "spool.tasks.high.email.send" || res.Duplicate {
		t.Fatalf("result %+v", res)
	}
	msg, err := b.tasks.GetMsg(ctx, res.Sequence)
	if err != nil {
		t.Fatal(err)
	}
	if msg.Subject != "spool.tasks.high.email.send" || string(msg.Data) != `{"to": "a@example.com"}` {
		t.Fatalf("stored %s %q", msg.Subject, msg.Data)
	}
	for k, v := range map[string]string{
		"Spool-Task-Id": "", "Nats-Msg-Id": "mail-1", // an immediate task's id is in Nats-Msg-Id alone "Spool-Max-Retries": "2", "Spool-Timeout": "30s",
		"Spool-Unique-Key": "user-1", "Spool-Unique-TTL": "1h0m0s", "X-Tenant": "acme",
		"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
	} {
		if got := msg.Header.Get(k); got != v {
			t.Errorf("header %s = %q, want %q", k, got, v)
		}
	}

	// The same id again: 200, duplicate, nothing new stored.
	r = b.do(t, "POST", "/v1/tasks", "", []byte(`{"type":"email.send","priority":"high","id":"mail-1"}`))
	if r.status != 200 || !decode[producer.EnqueueResult](t, r).Duplicate {
		t.Fatalf("duplicate: %d %s", r.status, r.body)
	}

	// Binary payload, default priority, trace context from the request.
	bin := []byte{0, 1, 2, 255}
	r = b.do(t, "POST", "/v1/tasks", "", fmt.Appendf(nil, `{"type":"blob","payload_base64":%q}`, base64.StdEncoding.EncodeToString(bin)))
	if r.status != 201 {
		t.Fatalf("binary: %d %s", r.status, r.body)
	}
	res = decode[producer.EnqueueResult](t, r)
	msg, err = b.tasks.GetMsg(ctx, res.Sequence)
	if err != nil {
		t.Fatal(err)
	}
	if msg.Subject != "spool.tasks.normal.blob" || string(msg.Data) != string(bin) {
		t.Fatalf("binary stored %s %v", msg.Subject, msg.Data)
	}
	if n := b.streamMsgs(t); n != 2 {
		t.Fatalf("stream holds %d", n)
	}
}

func TestHTTPErrors(t *testing.T) {
	t.Parallel()
	b := startBroker(t, embedded.Options{}, httpapi.Options{Token: "s3cret", MaxBody: 1536 << 10})
	const tok = "s3cret"
	if r := b.do(t, "POST", "/v1/tasks", tok, []byte(`{"type":"held","unique_key":"k","unique_ttl":"1h","id":"holder"}`)); r.status != 201 {
		t.Fatalf("setup: %d %s", r.status, r.body)
	}
	bigPayload := fmt.Appendf(nil, `{"type":"a","payload":%q}`, strings.Repeat("x", 1<<20))
	tooBigBody := fmt.Appendf(nil, `{"type":"a","payload":%q}`, strings.Repeat("x", 2<<20))
	tests := []struct {
		name                string
		method, path, token string
		body                string
		wantStatus          int
		wantCode, wantField string
	}{
		{"malformed json", "POST", "/v1/tasks", tok, `{"type":`, 400, "invalid_json", ""},
		{"empty body", "POST", "/v1/tasks", tok, ``, 400, "invalid_json", ""},
		{"two values", "POST", "/v1/tasks", tok, `{"type":"a"}{}`, 400, "invalid_json", ""},
		{"unknown field", "POST", "/v1/tasks", tok, `{"type":"a","prio":"high"}`, 400, "invalid_json", "prio"},
		{"wrong json type", "POST", "/v1/tasks", tok, `{"type":5}`, 400, "invalid_json", "type"},
		{"priority", "POST", "/v1/tasks", tok, `{"type":"a","priority":"urgent"}`, 400, "invalid_priority", "priority"},
		{"missing type", "POST", "/v1/tasks", tok, `{}`, 400, "invalid_type", "type"},
		{"type", "POST", "/v1/tasks", tok, `{"type":"a b"}`, 400, "invalid_type", "type"},
		{"id", "POST", "/v1/tasks", tok, `{"type":"a","id":"a.b"}`, 400, "invalid_id", "id"},
		{"reserved header", "POST", "/v1/tasks", tok, `{"type":"a","headers":{"Nats-TTL":"1s"}}`, 400, "invalid_header", "headers"},
		{"header value", "POST", "/v1/tasks", tok, `{"type":"a","headers":{"X-A":"1\r\nX-B: 2"}}`, 400, "invalid_header", "headers"},
		{"negative delay", "POST", "/v1/tasks", tok, `{"type":"a","delay":"-1s"}`, 400, "invalid_delay", "delay"},
		{"delay syntax", "POST", "/v1/tasks", tok, `{"type":"a","delay":"soon"}`, 400, "invalid_delay", "delay"},
		{"process_at syntax", "POST", "/v1/tasks", tok, `{"type":"a","process_at":"tomorrow"}`, 400, "invalid_delay", "process_at"},
		{"timeout", "POST", "/v1/tasks", tok, `{"type":"a","timeout":"forever"}`, 400, "invalid_timeout", "timeout"},
		{"max retries", "POST", "/v1/tasks", tok, `{"type":"a","max_retries":-1}`, 400, "invalid_max_retries", "max_retries"},
		{"unique without ttl", "POST", "/v1/tasks", tok, `{"type":"a","unique_key":"k"}`, 400, "invalid_unique", "unique_ttl"},
		{"two payloads", "POST", "/v1/tasks", tok, `{"type":"a","payload":1,"payload_base64":"AA=="}`, 400, "invalid_payload", "payload"},
		{"bad base64", "POST", "/v1/tasks", tok, `{"type":"a","payload_base64":"!!"}`, 400, "invalid_payload", "payload_base64"},
		{"payload too large", "POST", "/v1/tasks", tok, string(bigPayload), 413, "payload_too_large", "payload"},
		{"body too large", "POST", "/v1/tasks", tok, string(tooBigBody), 413, "body_too_large", ""},
		{"unique conflict", "POST", "/v1/tasks", tok, `{"type":"a","unique_key":"k","unique_ttl":"1h"}`, 409, "duplicate_unique", "unique_key"},
		{"no token", "POST", "/v1/tasks", "", `{"type":"a"}`, 401, "unauthorized", ""},
		{"wrong token", "POST", "/v1/tasks", "s3creT", `{"type":"a"}`, 401, "unauthorized", ""},
		{"no token on results", "GET", "/v1/tasks/x", "", ``, 401, "unauthorized", ""},
		{"result not found", "GET", "/v1/tasks/nope", tok, ``, 404, "not_found", ""},
		{"result bad id", "GET", "/v1/tasks/a.b", tok, ``, 400, "invalid_id", "id"},
		{"bad wait", "GET", "/v1/tasks/x?wait=forever", tok, ``, 400, "invalid_wait", "wait"},
		{"wait too long", "GET", "/v1/tasks/x?wait=1h", tok, ``, 400, "invalid_wait", "wait"},
		{"cancel unknown", "DELETE", "/v1/tasks/nope", tok, ``, 404, "not_found", "id"},
		{"cancel bad id", "DELETE", "/v1/tasks/a.b", tok, ``, 400, "invalid_id", "id"},
		{"unknown route", "GET", "/v2/tasks", tok, ``, 404, "not_found", ""},
		{"wrong method", "PUT", "/v1/tasks", tok, ``, 405, "method_not_allowed", ""},
		{"wrong method on a task", "POST", "/v1/tasks/x", tok, ``, 405, "method_not_allowed", ""},
		{"batch without tasks", "POST", "/v1/tasks/batch", tok, `{}`, 400, "invalid_json", "tasks"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var body []byte
			if tt.body != "" || tt.method == "POST" {
				body = []byte(tt.body)
			}
			r := b.do(t, tt.method, tt.path, tt.token, body)
			code, field, existing := r.errorCode()
			if r.status != tt.wantStatus || code != tt.wantCode || field != tt.wantField {
				t.Fatalf("got %d %s field %q, want %d %s field %q: %s", r.status, code, field, tt.wantStatus, tt.wantCode, tt.wantField, r.body)
			}
			if !strings.Contains(r.header.Get("Content-Type"), "application/json") {
				t.Errorf("content type %q", r.header.Get("Content-Type"))
			}
			if tt.wantCode == "duplicate_unique" && existing != "holder" {
				t.Errorf("existing_id %q", existing)
			}
			if tt.wantStatus == 401 && r.header.Get("WWW-Authenticate") == "" {
				t.Error("401 without WWW-Authenticate")
			}
		})
	}
	if n := b.streamMsgs(t); n != 1 {
		t.Fatalf("bad requests stored tasks: stream holds %d", n)
	}
}

func TestBatchOverHTTP(t *testing.T) {
	t.Parallel()
	b := startBroker(t, embedded.Options{}, httpapi.Options{MaxBatch: 5})
	body := `{"tasks":[{"type":"a","id":"b0"},{"type":"a","priority":"urgent"},{"type":"a","id":"b2","delay":"1h"},{"type":"a","timeout":"x"},{"type":"bad type"}]}`
	r := b.do(t, "POST", "/v1/tasks/batch", "", []byte(body))
	if r.status != 200 {
		t.Fatalf("%d %s", r.status, r.body)
	}
	var resp struct {
		Results []struct {
			producer.EnqueueResult
			Error *struct{ Code, Field string } `json:"error"`
		} `json:"results"`
		Enqueued, Failed int
	}
	if err := json.Unmarshal(r.body, &resp); err != nil {
		t.Fatal(err)
	}
	if len(resp.Results) != 5 || resp.Enqueued != 2 || resp.Failed != 3 {
		t.Fatalf("%s", r.body)
	}
	want := []struct{ code, field string }{{"", ""}, {"invalid_priority", "tasks[1].priority"}, {"", ""},
		{"invalid_timeout", "tasks[3].timeout"}, {"invalid_type", "tasks[4].type"}}
	for i, w := range want {
		got := resp.Results[i]
		if w.code == "" {
			if got.Error != nil || got.Sequence == 0 {
				t.Errorf("task %d: %+v", i, got)
			}
			continue
		}
		if got.Error == nil || got.Error.Code != w.code || got.Error.Field != w.field {
			t.Errorf("task %d: want %s %s, got %+v", i, w.code, w.field, got.Error)
		}
	}
	if resp.Results[0].ID != "b0" || !resp.Results[2].Scheduled {
		t.Errorf("results %s", r.body)
	}
	r = b.do(t, "POST", "/v1/tasks/batch", "", []byte(`{"tasks":[{"type":"a"},{"type":"a"},{"type":"a"},{"type":"a"},{"type":"a"},{"type":"a"}]}`))
	if code, _, _ := r.errorCode(); r.status != 413 || code != "batch_too_large" {
		t.Fatalf("oversized batch: %d %s", r.status, r.body)
	}
	if n := b.streamMsgs(t); n != 2 {
		t.Fatalf("stream holds %d", n)
	}
}

func TestResultAndWaitOverHTTP(t *testing.T) {
	t.Parallel()
	b := startBroker(t, embedded.Options{}, httpapi.Options{})
	b.putResult(t, spool.Result{ID: "job-1", Type: "a", State: spool.StateProcessing, Attempts: 1})
	r := b.do(t, "GET", "/v1/tasks/job-1", "", nil)
	if r.status != 200 || decode[spool.Result](t, r).State != spool.StateProcessing {
		t.Fatalf("%d %s", r.status, r.body)
	}
	// A short wait on a running task answers with its current state.
	r = b.do(t, "GET", "/v1/tasks/job-1?wait=200ms", "", nil)
	if r.status != 200 || decode[spool.Result](t, r).State != spool.StateProcessing {
		t.Fatalf("short wait: %d %s", r.status, r.body)
	}
	// A long wait returns as soon as the task completes.
	done := make(chan response, 1)
	go func() { done <- b.do(t, "GET", "/v1/tasks/job-1?wait=10s", "", nil) }()
	start := time.Now()
	b.putResult(t, spool.Result{ID: "job-1", Type: "a", State: spool.StateCompleted, Attempts: 1, Result: json.RawMessage(`"ok"`)})
	r = <-done
	if r.status != 200 || decode[spool.Result](t, r).State != spool.StateCompleted {
		t.Fatalf("long wait: %d %s", r.status, r.body)
	}
	if time.Since(start) > 8*time.Second {
		t.Fatalf("long wait took %s", time.Since(start))
	}
	// Waiting on a task without a document ends in 404.
	r = b.do(t, "GET", "/v1/tasks/ghost?wait=100ms", "", nil)
	if code, _, _ := r.errorCode(); r.status != 404 || code != "not_found" {
		t.Fatalf("ghost: %d %s", r.status, r.body)
	}
}

func TestCancelOverHTTP(t *testing.T) {
	t.Parallel()
	b := startBroker(t, embedded.Options{}, httpapi.Options{})
	r := b.do(t, "POST", "/v1/tasks", "", []byte(`{"type":"remind","id":"r1","process_at":"`+time.Now().Add(time.Hour).Format(time.RFC3339)+`"}`))
	if r.status != 201 || !decode[producer.EnqueueResult](t, r).Scheduled {
		t.Fatalf("%d %s", r.status, r.body)
	}
	r = b.do(t, "GET", "/v1/tasks/r1", "", nil)
	if r.status != 200 || decode[spool.Result](t, r).State != spool.StateScheduled {
		t.Fatalf("scheduled task: %d %s", r.status, r.body)
	}
	r = b.do(t, "DELETE", "/v1/tasks/r1", "", nil)
	if r.status != 200 || !strings.Contains(string(r.body), `"cancelled":true`) {
		t.Fatalf("cancel: %d %s", r.status, r.body)
	}
	r = b.do(t, "DELETE", "/v1/tasks/r1", "", nil)
	if code, _, _ := r.errorCode(); r.status != 404 || code != "not_found" {
		t.Fatalf("second cancel: %d %s", r.status, r.body)
	}
	if n := b.streamMsgs(t); n != 0 {
		t.Fatalf("stream holds %d", n)
	}
}

func TestHealthReadyAndOpenAPI(t *testing.T) {
	t.Parallel()
	b := startBroker(t, embedded.Options{}, httpapi.Options{Token: "t"})
	for _, path := range []string{"/healthz", "/readyz", "/v1/openapi.json"} {
		if r := b.do(t, "GET", path, "", nil); r.status != 200 {
			t.Errorf("%s: %d %s", path, r.status, r.body)
		}
	}
	doc := decode[map[string]any](t, b.do(t, "GET", "/v1/openapi.json", "", nil))
	if doc["openapi"] != "3.1.0" {
		t.Errorf("openapi %v", doc["openapi"])
	}
	paths, _ := doc["paths"].(map[string]any)
	for _, p := range []string{"/v1/tasks", "/v1/tasks/batch", "/v1/tasks/{id}", "/v1/tasks/{id}/result", "/healthz", "/readyz", "/v1/dlq", "/v1/dlq/{seq}", "/v1/dlq/{seq}/replay", "/v1/limits", "/v1/limits/{type}"} {
		if paths[p] == nil {
			t.Errorf("openapi.json lacks %s", p)
		}
	}

	// A broker whose streams are missing is alive but not ready.
	client, err := producer.New(b.nc, producer.WithPrefix("missing"))
	if err != nil {
		t.Fatal(err)
	}
	adm, err := admin.New(b.nc, admin.WithPrefix("missing"))
	if err != nil {
		t.Fatal(err)
	}
	srv := newTestServer(t, httpapi.NewHandler(client, adm, httpapi.Options{Logger: testLogger(t)}))
	nb := &broker{url: srv}
	if r := nb.do(t, "GET", "/healthz", "", nil); r.status != 200 {
		t.Errorf("healthz %d", r.status)
	}
	r := nb.do(t, "GET", "/readyz", "", nil)
	if code, _, _ := r.errorCode(); r.status != 503 || code != "unavailable" || r.header.Get("Retry-After") == "" {
		t.Errorf("readyz: %d %s %v", r.status, r.body, r.header)
	}
	r = nb.do(t, "POST", "/v1/tasks", "", []byte(`{"type":"a"}`))
	if code, _, _ := r.errorCode(); r.status != 503 || code != "unavailable" {
		t.Errorf("enqueue without streams: %d %s", r.status, r.body)
	}
}

func TestQueueFullOverHTTP(t *testing.T) {
	t.Parallel()
	b := startBroker(t, embedded.Options{MaxStore: 256 << 10}, httpapi.Options{})
	body := fmt.Appendf(nil, `{"type":"fill","payload_base64":%q}`, base64.StdEncoding.EncodeToString(make([]byte, 8<<10)))
	var r response
	stored := 0
	for range 1000 {
		r = b.do(t, "POST", "/v1/tasks", "", body)
		if r.status != 201 {
			break
		}
		stored++
	}
	code, _, _ := r.errorCode()
	if r.status != 503 || code != "queue_full" || r.header.Get("Retry-After") == "" {
		t.Fatalf("after %d tasks: %d %s", stored, r.status, r.body)
	}
	if n := b.streamMsgs(t); n != uint64(stored) {
		t.Fatalf("stream holds %d, %d acknowledged", n, stored)
	}
	// A batch that gets nothing in answers 503 too, with every task's error.
	batch := fmt.Appendf(nil, `{"tasks":[%s,%s]}`, body, body)
	r = b.do(t, "POST", "/v1/tasks/batch", "", batch)
	if r.status != 503 || r.header.Get("Retry-After") == "" || strings.Count(string(r.body), `"code":"queue_full"`) != 2 {
		t.Fatalf("batch when full: %d %s", r.status, r.body)
	}
	if n := b.streamMsgs(t); n != uint64(stored) {
		t.Fatalf("stream holds %d after the batch, %d acknowledged", n, stored)
	}
}

func TestBatch10000OverHTTP(t *testing.T) {
	t.Parallel()
	b := startBroker(t, embedded.Options{}, httpapi.Options{})
	var body strings.Builder
	body.WriteString(`{"tasks":[`)
	for i := range 10_000 {
		if i > 0 {
			body.WriteByte(',')
		}
		fmt.Fprintf(&body, `{"type":"bulk","id":"h-%05d","payload":%d}`, i, i)
	}
	body.WriteString(`]}`)
	r := b.do(t, "POST", "/v1/tasks/batch", "", []byte(body.String()))
	if r.status != 200 {
		t.Fatalf("%d %.300s", r.status, r.body)
	}
	var resp struct {
		Results []struct {
			ID    string `json:"id"`
			Error any    `json:"error"`
		} `json:"results"`
		Enqueued, Failed int
	}
	if err := json.Unmarshal(r.body, &resp); err != nil {
		t.Fatal(err)
	}
	if resp.Enqueued != 10_000 || resp.Failed != 0 || len(resp.Results) != 10_000 {
		t.Fatalf("enqueued %d failed %d", resp.Enqueued, resp.Failed)
	}
	for i, it := range resp.Results {
		if it.ID != fmt.Sprintf("h-%05d", i) || it.Error != nil {
			t.Fatalf("result %d: %+v", i, it)
		}
	}
	if n := b.streamMsgs(t); n != 10_000 {
		t.Fatalf("stream holds %d", n)
	}
}

func TestTraceContextFromRequestHeaders(t *testing.T) {
	t.Parallel()
	b := startBroker(t, embedded.Options{}, httpapi.Options{})
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	req, err := http.NewRequestWithContext(ctxFor(t), "POST", b.url+"/v1/tasks", strings.NewReader(`{"type":"traced"}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("traceparent", tp)
	req.Header.Set("tracestate", "v=1")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 201 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	m, err := b.tasks.GetLastMsgForSubject(ctxFor(t), "spool.tasks.normal.traced")
	if err != nil {
		t.Fatal(err)
	}
	if m.Header.Get("traceparent") != tp || m.Header.Get("tracestate") != "v=1" {
		t.Fatalf("headers %v", m.Header)
	}
}

func TestNewServerTimeouts(t *testing.T) {
	t.Parallel()
	srv := httpapi.NewServer("", http.NotFoundHandler(), nil)
	if srv.Addr != "127.0.0.1:8080" || srv.ReadTimeout != 15*time.Second || srv.WriteTimeout != 15*time.Second ||
		srv.IdleTimeout != 60*time.Second || srv.ReadHeaderTimeout == 0 {
		t.Fatalf("server %+v", srv)
	}
}

// GET /v1/tasks/{id}/result answers the output byte for byte, whatever the
// bytes; the document answers it in base64.
func TestOutputOverHTTP(t *testing.T) {
	t.Parallel()
	b := startBroker(t, embedded.Options{}, httpapi.Options{})
	all := make([]byte, 256)
	for i := range all {
		all[i] = byte(i)
	}
	cases := []struct {
		id, ctype string
		out       []byte
	}{
		{"bytes", "application/octet-stream", all},
		{"invalid-utf8", "application/octet-stream", []byte("a\xffb\xc3")},
		{"json", "application/json", []byte(`{"a":[1,2]}`)},
		{"text", "text/plain; charset=utf-8", []byte("hello <b>\n")},
	}
	for _, c := range cases {
		doc := spool.Result{ID: c.id, Type: "a", State: spool.StateCompleted, Attempts: 1}
		doc.Result, doc.ResultEncoding = spool.ResultValue(c.out)
		b.putResult(t, doc)
		r := b.do(t, "GET", "/v1/tasks/"+c.id+"/result", "", nil)
		if r.status != 200 || !bytes.Equal(r.body, c.out) || r.header.Get("Content-Type") != c.ctype {
			t.Errorf("%s: %d %q %q, want %q %q", c.id, r.status, r.header.Get("Content-Type"), r.body, c.ctype, c.out)
		}
		got, err := decode[spool.Result](t, b.do(t, "GET", "/v1/tasks/"+c.id, "", nil)).Output()
		if err != nil || !bytes.Equal(got, c.out) {
			t.Errorf("%s: document output %q, %v", c.id, got, err)
		}
	}
	b.putResult(t, spool.Result{ID: "empty", Type: "a", State: spool.StateCompleted, Attempts: 1})
	if r := b.do(t, "GET", "/v1/tasks/empty/result", "", nil); r.status != 204 || len(r.body) != 0 {
		t.Errorf("empty output: %d %q", r.status, r.body)
	}
	b.putResult(t, spool.Result{ID: "busy", Type: "a", State: spool.StateProcessing, Attempts: 1})
	if r := b.do(t, "GET", "/v1/tasks/busy/result", "", nil); r.status != 409 {
		t.Errorf("running task: %d %s", r.status, r.body)
	} else if code, field, _ := r.errorCode(); code != "not_completed" || field != "id" {
		t.Errorf("running task: %s %s", code, field)
	}
	if r := b.do(t, "GET", "/v1/tasks/ghost/result", "", nil); r.status != 404 {
		t.Errorf("no task: %d %s", r.status, r.body)
	}
}
