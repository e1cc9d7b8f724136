package faults_test

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/spoolq/spool/producer"
	"github.com/spoolq/spool/producer/httpapi"
	spool "github.com/spoolq/spool/shared"
	"github.com/spoolq/spool/streams"
	"github.com/spoolq/spool/streams/admin"
	"github.com/spoolq/spool/tests/checker"
)

// outcome is what should become of one poison input once it got past its
// entry point: its final state, and the dead-letter reason when dead.
type outcome struct {
	state  spool.State
	reason spool.Reason
}

var (
	completes = outcome{state: spool.StateCompleted}
	deadAs    = func(r spool.Reason) outcome { return outcome{state: spool.StateDead, reason: r} }
)

// accepted is a poison input that got in: the result key it will be
// written under and what should become of it.
type accepted struct {
	name  string
	key   string
	value string // the execution log's value: the payload as a string
	want  outcome
}

// binaryPayload holds every byte value, invalid UTF-8 and NULs included.
func binaryPayload() []byte {
	b := make([]byte, 256)
	for i := range b {
		b[i] = byte(i)
	}
	return b
}

// TestPoisonInput feeds malformed, oversized and nonsensical tasks through
// every entry point: a raw NATS client, the HTTP broker and the producer
// library. Each gets a clear error at its entry point or ends as it should
// (a dead letter with the right reason, or completed); no worker dies, and
// a normal task enqueued after the poison still completes.
func TestPoisonInput(t *testing.T) {
	start := time.Now()
	srv := startServer(t, t.TempDir(), 0, false)
	nc := connect(t, srv.url, "faults-poison")
	// By priority, the workers receive the unknown types and dead-letter
	// them no_handler; by type, such tasks would wait unserved.
	s := settings(1)
	s.Consumers = streams.ConsumersByPriority
	js := provision(t, nc, s)
	chk := checker.New()
	fl := newFleet(t, srv.url, chk, "SPOOL_CONCURRENCY=4")
	for range 2 {
		fl.start()
	}
	client, err := producer.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(client.Close)

	var got []accepted
	t.Run("raw NATS", func(t *testing.T) { got = append(got, poisonRaw(t, js)...) })
	t.Run("HTTP broker", func(t *testing.T) { got = append(got, poisonHTTP(t, client, nc)...) })
	t.Run("producer library", func(t *testing.T) { got = append(got, poisonLibrary(t, client)...) })

	// A normal task right after the poison is picked up as usual.
	canary, value := newTask(t, "poison-canary", spool.Normal, faultTask{})
	if _, err := client.Enqueue(ctxFor(t, 10*time.Second), canary); err != nil {
		t.Fatal(err)
	}
	got = append(got, accepted{name: "canary after the poison", key: canary.ID, value: value, want: completes})
	enqueued := time.Now()

	ctx := ctxFor(t, 2*time.Minute)
	kv, err := js.KeyValue(ctx, names.ResultsBucket())
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range got {
		chk.Enqueued(a.key, a.value)
		var doc spool.Result
		err := poll(ctx, 60*time.Second, 50*time.Millisecond, func() error {
			e, err := kv.Get(ctx, a.key)
			if err != nil {
				return err
			}
			if err := json.Unmarshal(e.Value(), &doc); err != nil {
				return err
			}
			if !doc.State.Terminal() {
				return fmt.Errorf("state %s", doc.State)
			}
			return nil
		})
		if err != nil {
			t.Errorf("%s: result %s not terminal: %v", a.name, a.key, err)
			continue
		}
		if doc.State != a.want.state || doc.Reason != a.want.reason {
			t.Errorf("%s: ended %s (reason %q, error %q), want %s (reason %q)", a.name, doc.State, doc.Reason, doc.Error, a.want.state, a.want.reason)
		}
		if a.key == canary.ID {
			t.Logf("canary completed %s after it was enqueued", doc.FinishedAt.Sub(enqueued).Round(time.Millisecond))
		}
	}
	fl.checkAlive()
	left := settle(t, ctx, js, 30*time.Second)
	fl.stopAll(30 * time.Second)
	collect(t, js, chk)
	fl.readLogs()
	r := report(t, "poison input", fmt.Sprintf("%d poison inputs", len(got)-1), start, chk, left)
	if len(left) > 0 {
		t.Errorf("no server fault here, yet %d acknowledged tasks were left in the task stream", len(left))
	}
	if r.DuplicateExecutions > 0 {
		t.Errorf("poison input caused %d duplicate executions", r.DuplicateExecutions)
	}
}

// poisonRaw publishes with a raw NATS client: any subject, any headers.
func poisonRaw(t *testing.T, js jetstream.JetStream) []accepted {
	past := time.Now().Add(-time.Hour).UTC().Format(time.RFC3339Nano)
	tests := []struct {
		name    string
		subject string
		header  map[string]string
		payload []byte
		key     string // result key; "" means the stream sequence
		wantErr string // the publish fails with this; "" means accepted
		want    outcome
	}{
		{name: "no Spool headers at all", subject: "spool.tasks.normal.fault.echo", payload: []byte("plain"), want: completes},
		{name: "malformed Spool-Max-Retries", subject: "spool.tasks.normal.fault.echo", key: "raw-retries",
			header: map[string]string{"Spool-Task-Id": "raw-retries", "Spool-Max-Retries": "many"}, want: deadAs(spool.ReasonBadInput)},
		{name: "Spool-Max-Retries out of range", subject: "spool.tasks.high.fault.echo", key: "raw-retries-range",
			header: map[string]string{"Spool-Task-Id": "raw-retries-range", "Spool-Max-Retries": "-1"}, want: deadAs(spool.ReasonBadInput)},
		{name: "malformed Spool-Timeout", subject: "spool.tasks.normal.fault.echo", key: "raw-timeout",
			header: map[string]string{"Spool-Task-Id": "raw-timeout", "Spool-Timeout": "forever"}, want: deadAs(spool.ReasonBadInput)},
		{name: "Spool-Unique-TTL without a key", subject: "spool.tasks.low.fault.echo", key: "raw-ttl",
			header: map[string]string{"Spool-Task-Id": "raw-ttl", "Spool-Unique-TTL": "5s"}, want: deadAs(spool.ReasonBadInput)},
		{name: "oversized Spool-Unique-Key", subject: "spool.tasks.normal.fault.echo", key: "raw-ukey",
			header: map[string]string{"Spool-Task-Id": "raw-ukey", "Spool-Unique-Key": strings.Repeat("k", 300), "Spool-Unique-TTL": "10s"},
			want:   deadAs(spool.ReasonBadInput)},
		{name: "header larger than the stream's max message", subject: "spool.tasks.normal.fault.echo",
			header: map[string]string{"Spool-Task-Id": "raw-bighdr", "X-Big": strings.Repeat("h", 1<<20+1)}, wantErr: "maximum"},
		{name: "invalid Spool-Task-Id", subject: "spool.tasks.normal.fault.echo",
			header: map[string]string{"Spool-Task-Id": "bad id!"}, want: deadAs(spool.ReasonBadInput)},
		{name: "invalid id in Nats-Msg-Id only", subject: "spool.tasks.normal.fault.echo",
			header: map[string]string{"Nats-Msg-Id": "bad/id"}, want: deadAs(spool.ReasonBadInput)},
		{name: "invalid type token", subject: "spool.tasks.normal.bad$type", key: "raw-badtype",
			header: map[string]string{"Spool-Task-Id": "raw-badtype"}, want: deadAs(spool.ReasonBadInput)},
		{name: "unknown type", subject: "spool.tasks.critical.no.such.type", key: "raw-unknown",
			header: map[string]string{"Spool-Task-Id": "raw-unknown"}, want: deadAs(spool.ReasonNoHandler)},
		{name: "id in Nats-Msg-Id only, unknown type", subject: "spool.tasks.low.no.such.type", key: "raw-msgid-only",
			header: map[string]string{"Nats-Msg-Id": "raw-msgid-only"}, want: deadAs(spool.ReasonNoHandler)},
		{name: "empty payload", subject: "spool.tasks.idle.fault.echo", key: "raw-empty",
			header: map[string]string{"Spool-Task-Id": "raw-empty"}, want: completes},
		{name: "binary payload", subject: "spool.tasks.normal.fault.echo", key: "raw-binary",
			header: map[string]string{"Spool-Task-Id": "raw-binary"}, payload: binaryPayload(), want: completes},
		{name: "binary payload to a JSON handler", subject: "spool.tasks.normal.fault.task", key: "raw-binary-json",
			header: map[string]string{"Spool-Task-Id": "raw-binary-json"}, payload: binaryPayload(), want: deadAs(spool.ReasonPermanent)},
		{name: "payload over the limit", subject: "spool.tasks.normal.fault.echo",
			header: map[string]string{"Spool-Task-Id": "raw-big"}, payload: bytes.Repeat([]byte("p"), 2<<20), wantErr: "maximum"},
		{name: "schedule in the past", subject: "spool.sched.raw-past", key: "raw-past",
			header: map[string]string{"Spool-Task-Id": "raw-past", "Nats-Schedule": "@at " + past,
				"Nats-Schedule-Target": "spool.tasks.normal.fault.echo"}, want: completes},
		{name: "unparseable schedule", subject: "spool.sched.raw-unparseable",
			header: map[string]string{"Spool-Task-Id": "raw-unparseable", "Nats-Schedule": "@at tomorrow",
				"Nats-Schedule-Target": "spool.tasks.normal.fault.echo"}, wantErr: "schedule"},
		{name: "unknown priority", subject: "spool.tasks.urgent.fault.echo",
			header: map[string]string{"Spool-Task-Id": "raw-urgent"}, wantErr: "no response from stream"},
	}
	var out []accepted
	for _, tt := range tests {
		m := &nats.Msg{Subject: tt.subject, Data: tt.payload, Header: nats.Header{}}
		for k, v := range tt.header {
			m.Header[k] = []string{v} // as sent, without canonicalising the name
		}
		ack, err := js.PublishMsg(ctxFor(t, 10*time.Second), m)
		switch {
		case tt.wantErr != "" && err == nil:
			t.Errorf("%s: accepted (seq %d), want an error with %q", tt.name, ack.Sequence, tt.wantErr)
			continue
		case tt.wantErr != "" && !strings.Contains(err.Error(), tt.wantErr):
			t.Errorf("%s: error %q, want one with %q", tt.name, err, tt.wantErr)
			continue
		case tt.wantErr != "":
			t.Logf("%s: refused: %v", tt.name, err)
			continue
		case err != nil:
			t.Errorf("%s: %v", tt.name, err)
			continue
		}
		key := tt.key
		if key == "" {
			key = strconv.FormatUint(ack.Sequence, 10)
		}
		out = append(out, accepted{name: "raw: " + tt.name, key: key, value: string(tt.payload), want: tt.want})
	}
	return out
}

// poisonHTTP posts to the real broker handler.
func poisonHTTP(t *testing.T, client *producer.Client, nc *nats.Conn) []accepted {
	adm, err := admin.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(httpapi.NewHandler(client, adm, httpapi.Options{Logger: slog.New(slog.DiscardHandler)}))
	t.Cleanup(srv.Close)
	b64 := base64.StdEncoding.EncodeToString(binaryPayload())
	big := `"` + strings.Repeat("p", 3<<19) + `"` // 1.5 MiB: under the body limit, over the task limit
	past := time.Now().Add(-time.Hour).UTC().Format(time.RFC3339)
	tests := []struct {
		name       string
		body       string
		wantStatus int
		wantCode   string // error code; "" when accepted
		key        string
		value      string
		want       outcome
	}{
		{name: "malformed JSON", body: `{"type":"fault.echo",`, wantStatus: 400, wantCode: "invalid_json"},
		{name: "unknown field", body: `{"type":"fault.echo","colour":"red"}`, wantStatus: 400, wantCode: "invalid_json"},
		{name: "two JSON values", body: `{"type":"fault.echo"}{}`, wantStatus: 400, wantCode: "invalid_json"},
		{name: "invalid id", body: `{"type":"fault.echo","id":"bad id!"}`, wantStatus: 400, wantCode: "invalid_id"},
		{name: "invalid type token", body: `{"type":"bad$type"}`, wantStatus: 400, wantCode: "invalid_type"},
		{name: "empty type token", body: `{"type":"a..b"}`, wantStatus: 400, wantCode: "invalid_type"},
		{name: "unknown priority", body: `{"type":"fault.echo","priority":"urgent"}`, wantStatus: 400, wantCode: "invalid_priority"},
		{name: "reserved header", body: `{"type":"fault.echo","headers":{"Nats-Msg-Id":"x"}}`, wantStatus: 400, wantCode: "invalid_header"},
		{name: "header value with CRLF", body: `{"type":"fault.echo","headers":{"X-A":"a\r\nSpool-Task-Id: b"}}`, wantStatus: 400, wantCode: "invalid_header"},
		{name: "negative max_retries", body: `{"type":"fault.echo","max_retries":-1}`, wantStatus: 400, wantCode: "invalid_max_retries"},
		{name: "unparseable timeout", body: `{"type":"fault.echo","timeout":"forever"}`, wantStatus: 400, wantCode: "invalid_timeout"},
		{name: "payload_base64 not base64", body: `{"type":"fault.echo","payload_base64":"%%%"}`, wantStatus: 400, wantCode: "invalid_payload"},
		{name: "payload over the limit", body: `{"type":"fault.echo","payload":` + big + `}`, wantStatus: 413, wantCode: "payload_too_large"},
		{name: "body over the limit", body: `{"type":"fault.echo","payload":"` + strings.Repeat("p", 3<<20) + `"}`, wantStatus: 413, wantCode: "body_too_large"},
		{name: "unparseable process_at", body: `{"type":"fault.echo","process_at":"tomorrow"}`, wantStatus: 400, wantCode: "invalid_delay"},
		{name: "negative delay", body: `{"type":"fault.echo","delay":"-5s"}`, wantStatus: 400, wantCode: "invalid_delay"},
		{name: "unknown type", body: `{"type":"no.such.type","id":"http-unknown"}`, wantStatus: 201,
			key: "http-unknown", want: deadAs(spool.ReasonNoHandler)},
		{name: "no payload", body: `{"type":"fault.echo","id":"http-empty"}`, wantStatus: 201, key: "http-empty", want: completes},
		{name: "binary payload", body: `{"type":"fault.echo","id":"http-binary","payload_base64":"` + b64 + `"}`, wantStatus: 201,
			key: "http-binary", value: string(binaryPayload()), want: completes},
		{name: "process_at in the past", body: `{"type":"fault.echo","id":"http-past","payload":1,"process_at":"` + past + `"}`, wantStatus: 201,
			key: "http-past", value: "1", want: completes},
	}
	var out []accepted
	for _, tt := range tests {
		req, err := http.NewRequestWithContext(ctxFor(t, 10*time.Second), http.MethodPost, srv.URL+"/v1/tasks", strings.NewReader(tt.body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		var e struct {
			Error struct {
				Code    string `json:"code"`
				Message string `json:"message"`
			} `json:"error"`
		}
		_ = json.Unmarshal(body, &e) // an accepted task's answer has no error
		if resp.StatusCode != tt.wantStatus || e.Error.Code != tt.wantCode {
			t.Errorf("%s: %d %q, want %d %q; body %.300s", tt.name, resp.StatusCode, e.Error.Code, tt.wantStatus, tt.wantCode, body)
			continue
		}
		if tt.wantCode != "" {
			if e.Error.Message == "" {
				t.Errorf("%s: error %s without a message", tt.name, tt.wantCode)
			}
			continue
		}
		out = append(out, accepted{name: "http: " + tt.name, key: tt.key, value: tt.value, want: tt.want})
	}
	return out
}

// poisonLibrary enqueues through the producer library.
func poisonLibrary(t *testing.T, client *producer.Client) []accepted {
	tests := []struct {
		name    string
		task    producer.Task
		wantErr error
		value   string
		want    outcome
	}{
		{name: "invalid type token", task: producer.Task{Type: "bad$type"}, wantErr: producer.ErrInvalidType},
		{name: "unknown priority", task: producer.Task{Type: "fault.echo", Priority: new(spool.Priority(7))}, wantErr: producer.ErrInvalidPriority},
		{name: "invalid id", task: producer.Task{Type: "fault.echo", ID: "bad id!"}, wantErr: producer.ErrInvalidID},
		{name: "reserved header", task: producer.Task{Type: "fault.echo", Headers: map[string]string{"Spool-Reason": "x"}}, wantErr: producer.ErrInvalidHeader},
		{name: "oversized unique key", task: producer.Task{Type: "fault.echo", UniqueKey: strings.Repeat("k", 300), UniqueTTL: time.Minute}, wantErr: producer.ErrInvalidUnique},
		{name: "payload over the limit", task: producer.Task{Type: "fault.echo", Payload: make([]byte, 2<<20)}, wantErr: producer.ErrPayloadTooLarge},
		{name: "unknown type", task: producer.Task{Type: "no.such.type", ID: "lib-unknown"}, want: deadAs(spool.ReasonNoHandler)},
		{name: "empty payload", task: producer.Task{Type: "fault.echo", ID: "lib-empty"}, want: completes},
		{name: "binary payload", task: producer.Task{Type: "fault.echo", ID: "lib-binary", Payload: binaryPayload()},
			value: string(binaryPayload()), want: completes},
		{name: "process-at in the past", task: producer.Task{Type: "fault.echo", ID: "lib-past", ProcessAt: time.Now().Add(-time.Hour)}, want: completes},
	}
	var out []accepted
	for _, tt := range tests {
		res, err := client.Enqueue(ctxFor(t, 10*time.Second), tt.task)
		switch {
		case tt.wantErr != nil && !errors.Is(err, tt.wantErr):
			t.Errorf("%s: error %v, want %v", tt.name, err, tt.wantErr)
			continue
		case tt.wantErr != nil:
			t.Logf("%s: refused: %v", tt.name, err)
			continue
		case err != nil:
			t.Errorf("%s: %v", tt.name, err)
			continue
		}
		out = append(out, accepted{name: "library: " + tt.name, key: res.ID, value: tt.value, want: tt.want})
	}
	return out
}
