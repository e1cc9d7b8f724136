package httpapi

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	spool "github.com/spoolq/spool/shared"
)

// requestCodes are the codes a request decoder may answer with.
var requestCodes = map[string]bool{
	CodeInvalidJSON: true, CodeInvalidPriority: true, CodeInvalidPayload: true,
	CodeInvalidTimeout: true, CodeInvalidUnique: true, CodeInvalidDelay: true,
}

// taskSeeds are request bodies of every shape the decoders meet.
var taskSeeds = []string{
	`{"type":"email.send"}`,
	`{"type":"email.send","priority":"high","payload":{"to":"ada@example.com"},"id":"welcome-ada","max_retries":5,"timeout":"30s"}`,
	`{"type":"a","payload_base64":"AAEC/w==","unique_key":"k","unique_ttl":"1m","delay":"5s"}`,
	`{"type":"a","process_at":"2026-01-02T15:04:05.123456789+02:00","headers":{"X-A":"b"},"traceparent":"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}`,
	`{"type":"a","payload":null}`,
	`{"type":"a","payload":"x","payload_base64":"eA=="}`,
	`{"type":"a","priority":"urgent"}`,
	`{"type":"a","timeout":"forever","delay":"-1s"}`,
	`{"type":"a","process_at":"tomorrow"}`,
	`{"type":"a","colour":"red"}`,
	`{"type":1}`,
	`{"type":"a"}{}`,
	`{"type":"a",`,
	`[]`,
	``,
	`null`,
	"{\"type\":\"a\",\"payload_base64\":\"\xff\"}",
}

// request is the HTTP request a decoded task may take trace headers from.
func request() *http.Request {
	r := httptest.NewRequest(http.MethodPost, "/v1/tasks", nil)
	r.Header.Set("traceparent", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
	return r
}

// checkAPIError fails unless err is an *apiError or a *spool.FieldError
// that answers as one a client can act on: a 4xx status, a known code and a
// message.
func checkAPIError(t *testing.T, what string, body []byte, err error) {
	t.Helper()
	var ae *apiError
	var fe *spool.FieldError
	if !errors.As(err, &ae) && !errors.As(err, &fe) {
		t.Fatalf("%s of %q: %T %v is neither an *apiError nor a *spool.FieldError", what, body, err, err)
	}
	ae = fromError(err)
	if ae.Status != http.StatusBadRequest && ae.Status != http.StatusRequestEntityTooLarge {
		t.Fatalf("%s of %q: status %d", what, body, ae.Status)
	}
	if !requestCodes[ae.Code] || ae.Message == "" {
		t.Fatalf("%s of %q: code %q message %q", what, body, ae.Code, ae.Message)
	}
}

// FuzzDecodeTaskRequest checks the body decoder of POST /v1/tasks: it never
// panics, every refusal is a 400 with a known code and a message, and a
// request it accepts encodes back to JSON that decodes to the same task.
func FuzzDecodeTaskRequest(f *testing.F) {
	for _, s := range taskSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		var tr TaskRequest
		if err := decodeJSON(body, &tr); err != nil {
			checkAPIError(t, "decoding", body, err)
			return
		}
		task, err := tr.task(request())
		if err != nil {
			checkAPIError(t, "converting", body, err)
			return
		}
		if task.Type != tr.Type || task.ID != tr.ID || !task.PriorityOrDefault().Valid() {
			t.Fatalf("%q: task %+v does not match request %+v", body, task, tr)
		}
		if tr.PayloadBase64 != nil {
			want, err := base64.StdEncoding.DecodeString(*tr.PayloadBase64)
			if err != nil || !bytes.Equal(task.Payload, want) {
				t.Fatalf("%q: payload %q, want the decoded base64 %q (%v)", body, task.Payload, want, err)
			}
		} else if task.Payload != nil && !json.Valid(task.Payload) {
			t.Fatalf("%q: JSON payload %q is not JSON", body, task.Payload)
		}

		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		enc.SetEscapeHTML(false) // keep the payload's bytes: & < > stay as they are
		if err := enc.Encode(tr); err != nil {
			t.Fatalf("%q: re-encoding %+v: %v", body, tr, err)
		}
		again := buf.Bytes()
		var tr2 TaskRequest
		if err := decodeJSON(again, &tr2); err != nil {
			t.Fatalf("%q re-encoded as %q does not decode: %v", body, again, err)
		}
		task2, err := tr2.task(request())
		if err != nil {
			t.Fatalf("%q re-encoded as %q is refused: %v", body, again, err)
		}
		p1, p2 := compact(task.Payload), compact(task2.Payload)
		if tr.PayloadBase64 != nil {
			p1, p2 = task.Payload, task2.Payload
		}
		if task.Type != task2.Type || task.PriorityOrDefault() != task2.PriorityOrDefault() || task.ID != task2.ID ||
			!bytes.Equal(p1, p2) || task.Timeout != task2.Timeout || task.Delay != task2.Delay ||
			!task.ProcessAt.Equal(task2.ProcessAt) || task.UniqueKey != task2.UniqueKey ||
			task.UniqueTTL != task2.UniqueTTL || task.TraceParent != task2.TraceParent ||
			len(task.Headers) != len(task2.Headers) {
			t.Fatalf("%q and its re-encoding %q decode differently:\n%+v\n%+v", body, again, task, task2)
		}
	})
}

func compact(b []byte) []byte {
	var out bytes.Buffer
	if err := json.Compact(&out, b); err != nil {
		return b
	}
	return out.Bytes()
}

// FuzzDecodeBatchRequest checks the body decoder of POST /v1/tasks/batch and
// of its items: no panic, and every refusal a client error with a code.
func FuzzDecodeBatchRequest(f *testing.F) {
	f.Add([]byte(`{"tasks":[]}`))
	f.Add([]byte(`{"tasks":null}`))
	f.Add([]byte(`{}`))
	f.Add([]byte(`{"tasks":[{"type":"a"},{"type":"b","priority":"low"},{"type":"c","delay":"x"},7,"s",null]}`))
	f.Add([]byte(`{"tasks":{"type":"a"}}`))
	for _, s := range taskSeeds {
		f.Add([]byte(`{"tasks":[` + s + `]}`))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		var req BatchRequest
		if err := decodeJSON(body, &req); err != nil {
			checkAPIError(t, "decoding the batch", body, err)
			return
		}
		for _, raw := range req.Tasks {
			var tr TaskRequest
			err := decodeJSON(raw, &tr)
			if err == nil {
				_, err = tr.task(request())
			}
			if err != nil {
				checkAPIError(t, "decoding a batch item", raw, err)
			}
		}
	})
}
