package spool_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	spool "github.com/spoolq/spool/shared"
)

// checkFieldError fails unless err is a *FieldError of field with code that
// wraps wantErr, or is nil when wantErr is.
func checkFieldError(t *testing.T, err, wantErr error, field, code string) {
	t.Helper()
	if wantErr == nil {
		if err != nil {
			t.Fatalf("want no error, got %v", err)
		}
		return
	}
	var fe *spool.FieldError
	if !errors.As(err, &fe) {
		t.Fatalf("want a *FieldError wrapping %v, got %T %v", wantErr, err, err)
	}
	if !errors.Is(err, wantErr) || fe.Field != field || fe.Code != code {
		t.Fatalf("got field %q code %q: %v; want field %q code %q wrapping %v", fe.Field, fe.Code, err, field, code, wantErr)
	}
	if spool.ErrorCode(err) != code {
		t.Fatalf("ErrorCode = %q, want %q", spool.ErrorCode(err), code)
	}
}

func TestTaskFieldsValidate(t *testing.T) {
	t.Parallel()
	ok := func(f func(*spool.TaskFields)) spool.TaskFields {
		tf := spool.TaskFields{Type: "email.send", Priority: spool.Normal}
		f(&tf)
		return tf
	}
	tests := []struct {
		name        string
		fields      spool.TaskFields
		wantErr     error
		field, code string
	}{
		{"minimal", ok(func(*spool.TaskFields) {}), nil, "", ""},
		{"everything set", ok(func(f *spool.TaskFields) {
			f.Meta = spool.Meta{ID: "t-1", MaxRetries: new(5), Timeout: time.Minute, UniqueKey: "k", UniqueTTL: time.Hour,
				TraceParent: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", TraceState: "a=b"}
			f.Delay = time.Second
			f.Headers = map[string]string{"X-Tenant": "acme"}
		}), nil, "", ""},
		{"process-at", ok(func(f *spool.TaskFields) { f.ProcessAt = time.Now().Add(time.Hour) }), nil, "", ""},
		{"zero retries", ok(func(f *spool.TaskFields) { f.Meta.MaxRetries = new(0) }), nil, "", ""},
		{"result discarded", ok(func(f *spool.TaskFields) { f.Meta.Result = spool.DiscardResult }), nil, "", ""},
		{"result kept", ok(func(f *spool.TaskFields) { f.Meta.Result = spool.KeepResult }), nil, "", ""},
		{"result policy", ok(func(f *spool.TaskFields) { f.Meta.Result = "drop" }), spool.ErrInvalidResultPolicy, "result_policy", "invalid_result_policy"},
		{"priority", ok(func(f *spool.TaskFields) { f.Priority = 7 }), spool.ErrInvalidPriority, "priority", "invalid_priority"},
		{"empty type", ok(func(f *spool.TaskFields) { f.Type = "" }), spool.ErrInvalidType, "type", "invalid_type"},
		{"type", ok(func(f *spool.TaskFields) { f.Type = "a b" }), spool.ErrInvalidType, "type", "invalid_type"},
		{"type token", ok(func(f *spool.TaskFields) { f.Type = "a..b" }), spool.ErrInvalidType, "type", "invalid_type"},
		{"id", ok(func(f *spool.TaskFields) { f.Meta.ID = "a.b" }), spool.ErrInvalidID, "id", "invalid_id"},
		{"id too long", ok(func(f *spool.TaskFields) { f.Meta.ID = strings.Repeat("x", 129) }), spool.ErrInvalidID, "id", "invalid_id"},
		{"negative retries", ok(func(f *spool.TaskFields) { f.Meta.MaxRetries = new(-1) }), spool.ErrInvalidMaxRetries, "max_retries", "invalid_max_retries"},
		{"too many retries", ok(func(f *spool.TaskFields) { f.Meta.MaxRetries = new(1001) }), spool.ErrInvalidMaxRetries, "max_retries", "invalid_max_retries"},
		{"retries are a header", ok(func(f *spool.TaskFields) { f.Meta.MaxRetries = new(1001) }), spool.ErrInvalidHeader, "max_retries", "invalid_max_retries"},
		{"negative timeout", ok(func(f *spool.TaskFields) { f.Meta.Timeout = -time.Second }), spool.ErrInvalidTimeout, "timeout", "invalid_timeout"},
		{"timeout too long", ok(func(f *spool.TaskFields) { f.Meta.Timeout = 25 * time.Hour }), spool.ErrInvalidTimeout, "timeout", "invalid_timeout"},
		{"unique without ttl", ok(func(f *spool.TaskFields) { f.Meta.UniqueKey = "k" }), spool.ErrInvalidUnique, "unique_ttl", "invalid_unique"},
		{"unique ttl under 1s", ok(func(f *spool.TaskFields) { f.Meta.UniqueKey, f.Meta.UniqueTTL = "k", time.Millisecond }), spool.ErrInvalidUnique, "unique_ttl", "invalid_unique"},
		{"unique ttl without key", ok(func(f *spool.TaskFields) { f.Meta.UniqueTTL = time.Minute }), spool.ErrInvalidUnique, "unique_key", "invalid_unique"},
		{"negative unique ttl", ok(func(f *spool.TaskFields) { f.Meta.UniqueKey, f.Meta.UniqueTTL = "k", -time.Second }), spool.ErrInvalidUnique, "unique_ttl", "invalid_unique"},
		{"unique key too long", ok(func(f *spool.TaskFields) { f.Meta.UniqueKey, f.Meta.UniqueTTL = strings.Repeat("k", 257), time.Minute }), spool.ErrInvalidUnique, "unique_key", "invalid_unique"},
		{"key too long", ok(func(f *spool.TaskFields) { f.Meta.Key = strings.Repeat("k", 257) }), spool.ErrInvalidKey, "key", "invalid_key"},
		{"key with a newline", ok(func(f *spool.TaskFields) { f.Meta.Key = "a\nb" }), spool.ErrInvalidKey, "key", "invalid_key"},
		{"unique key CRLF", ok(func(f *spool.TaskFields) { f.Meta.UniqueKey, f.Meta.UniqueTTL = "k\r\n", time.Minute }), spool.ErrInvalidUnique, "unique_key", "invalid_unique"},
		{"traceparent CRLF", ok(func(f *spool.TaskFields) { f.Meta.TraceParent = "00\r\n" }), spool.ErrInvalidHeader, "traceparent", "invalid_header"},
		{"tracestate too long", ok(func(f *spool.TaskFields) { f.Meta.TraceState = strings.Repeat("a", 513) }), spool.ErrInvalidHeader, "tracestate", "invalid_header"},
		{"negative delay", ok(func(f *spool.TaskFields) { f.Delay = -time.Second }), spool.ErrInvalidDelay, "delay", "invalid_delay"},
		{"delay and process-at", ok(func(f *spool.TaskFields) { f.Delay, f.ProcessAt = time.Second, time.Now() }), spool.ErrInvalidDelay, "delay", "invalid_delay"},
		{"header CRLF", ok(func(f *spool.TaskFields) { f.Headers = map[string]string{"X-A": "1\r\nX-B: 2"} }), spool.ErrInvalidHeader, "headers", "invalid_header"},
		{"header bad name", ok(func(f *spool.TaskFields) { f.Headers = map[string]string{"X A": "1"} }), spool.ErrInvalidHeader, "headers", "invalid_header"},
		{"header empty name", ok(func(f *spool.TaskFields) { f.Headers = map[string]string{"": "1"} }), spool.ErrInvalidHeader, "headers", "invalid_header"},
		{"header reserved Nats-", ok(func(f *spool.TaskFields) { f.Headers = map[string]string{"Nats-TTL": "1s"} }), spool.ErrInvalidHeader, "headers", "invalid_header"},
		{"header reserved Spool-", ok(func(f *spool.TaskFields) { f.Headers = map[string]string{"spool-task-id": "x"} }), spool.ErrInvalidHeader, "headers", "invalid_header"},
		{"header reserved trace", ok(func(f *spool.TaskFields) { f.Headers = map[string]string{"TraceParent": "x"} }), spool.ErrInvalidHeader, "headers", "invalid_header"},
		{"first field at fault wins", ok(func(f *spool.TaskFields) { f.Type, f.Delay = "a b", -time.Second }), spool.ErrInvalidType, "type", "invalid_type"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			checkFieldError(t, tt.fields.Validate(), tt.wantErr, tt.field, tt.code)
		})
	}
}

// TestDecodeMeta reads the metadata headers; a bad value gets the field and
// code the library gives it, and wraps ErrInvalidHeader (ErrInvalidID for
// the id).
func TestDecodeMeta(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name        string
		h           nats.Header
		wantID      string
		wantErr     error
		field, code string
	}{
		{"empty", nats.Header{}, "", nil, "", ""},
		{"msg id fallback", nats.Header{"Nats-Msg-Id": {"m1"}}, "m1", nil, "", ""},
		{"task id wins", nats.Header{"Nats-Msg-Id": {"m1"}, "Spool-Task-Id": {"t1"}}, "t1", nil, "", ""},
		{"retries and timeout", nats.Header{"Spool-Max-Retries": {"2"}, "Spool-Timeout": {"30s"}}, "", nil, "", ""},
		{"unique ok", nats.Header{"Spool-Unique-Key": {"k"}, "Spool-Unique-Ttl": {"1m"}}, "", nil, "", ""},
		{"long trace context passes", nats.Header{"tracestate": {strings.Repeat("a", 600)}}, "", nil, "", ""},
		{"bad id", nats.Header{"Spool-Task-Id": {"a.b"}}, "", spool.ErrInvalidID, "id", "invalid_id"},
		{"bad msg id", nats.Header{"Nats-Msg-Id": {"a b"}}, "", spool.ErrInvalidID, "id", "invalid_id"},
		{"retries not a number", nats.Header{"Spool-Max-Retries": {"three"}}, "", spool.ErrInvalidMaxRetries, "max_retries", "invalid_max_retries"},
		{"retries negative", nats.Header{"Spool-Max-Retries": {"-1"}}, "", spool.ErrInvalidMaxRetries, "max_retries", "invalid_max_retries"},
		{"retries too many", nats.Header{"Spool-Max-Retries": {"1001"}}, "", spool.ErrInvalidMaxRetries, "max_retries", "invalid_max_retries"},
		{"timeout not a duration", nats.Header{"Spool-Timeout": {"soon"}}, "", spool.ErrInvalidTimeout, "timeout", "invalid_timeout"},
		{"timeout zero", nats.Header{"Spool-Timeout": {"0s"}}, "", spool.ErrInvalidTimeout, "timeout", "invalid_timeout"},
		{"timeout negative", nats.Header{"Spool-Timeout": {"-1s"}}, "", spool.ErrInvalidTimeout, "timeout", "invalid_timeout"},
		{"timeout too long", nats.Header{"Spool-Timeout": {"25h"}}, "", spool.ErrInvalidTimeout, "timeout", "invalid_timeout"},
		{"unique ttl not a duration", nats.Header{"Spool-Unique-Key": {"k"}, "Spool-Unique-Ttl": {"long"}}, "", spool.ErrInvalidUnique, "unique_ttl", "invalid_unique"},
		{"unique ttl without key", nats.Header{"Spool-Unique-Ttl": {"1h"}}, "", spool.ErrInvalidUnique, "unique_key", "invalid_unique"},
		{"unique key without ttl", nats.Header{"Spool-Unique-Key": {"k"}}, "", spool.ErrInvalidUnique, "unique_ttl", "invalid_unique"},
		{"unique key too long", nats.Header{"Spool-Unique-Key": {strings.Repeat("k", 257)}, "Spool-Unique-TTL": {"1m"}}, "", spool.ErrInvalidUnique, "unique_key", "invalid_unique"},
		{"flow-control fields", nats.Header{"Spool-Key": {"customer 42"}, "Spool-Prior-Attempts": {"2"}, "Spool-Deferrals": {"7"}}, "", nil, "", ""},
		{"flow key too long", nats.Header{"Spool-Key": {strings.Repeat("k", 257)}}, "", spool.ErrInvalidKey, "key", "invalid_key"},
		{"result discarded", nats.Header{"Spool-Result": {"discard"}}, "", nil, "", ""},
		{"result kept, header in another case", nats.Header{"Spool-RESULT": {"keep"}}, "", nil, "", ""},
		{"result policy unknown", nats.Header{"Spool-Result": {"Discard"}}, "", spool.ErrInvalidResultPolicy, "result_policy", "invalid_result_policy"},
		{"prior attempts not a number", nats.Header{"Spool-Prior-Attempts": {"two"}}, "", spool.ErrInvalidHeader, "headers", "invalid_header"},
		{"deferrals negative", nats.Header{"Spool-Deferrals": {"-1"}}, "", spool.ErrInvalidHeader, "headers", "invalid_header"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			m, err := spool.DecodeMeta(tt.h)
			checkFieldError(t, err, tt.wantErr, tt.field, tt.code)
			switch {
			case tt.wantErr != nil && tt.field != "id" && !errors.Is(err, spool.ErrInvalidHeader):
				t.Fatalf("%v does not wrap ErrInvalidHeader", err)
			case tt.wantErr == nil && m.ID != tt.wantID:
				t.Fatalf("id %q, want %q", m.ID, tt.wantID)
			}
		})
	}
}

func TestParseFields(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name        string
		parse       func() error
		wantErr     error
		field, code string
	}{
		{"timeout", func() error { _, err := spool.ParseDuration("timeout", "30s"); return err }, nil, "", ""},
		{"empty duration", func() error { _, err := spool.ParseDuration("delay", ""); return err }, nil, "", ""},
		{"bad timeout", func() error { _, err := spool.ParseDuration("timeout", "forever"); return err }, spool.ErrInvalidTimeout, "timeout", "invalid_timeout"},
		{"bad unique ttl", func() error { _, err := spool.ParseDuration("unique_ttl", "1 hour"); return err }, spool.ErrInvalidUnique, "unique_ttl", "invalid_unique"},
		{"bad delay", func() error { _, err := spool.ParseDuration("delay", "soon"); return err }, spool.ErrInvalidDelay, "delay", "invalid_delay"},
		{"process-at", func() error { _, err := spool.ParseProcessAt("2026-01-02T15:04:05.5+02:00"); return err }, nil, "", ""},
		{"bad process-at", func() error { _, err := spool.ParseProcessAt("tomorrow"); return err }, spool.ErrInvalidDelay, "process_at", "invalid_delay"},
		{"payload too large", func() error {
			return spool.ValidateMsgSize(&nats.Msg{Data: make([]byte, 100), Header: nats.Header{"A": {"b"}}}, 100)
		}, spool.ErrPayloadTooLarge, "payload", "payload_too_large"},
		{"payload at the limit", func() error { return spool.ValidateMsgSize(&nats.Msg{Data: make([]byte, 100)}, 100) }, nil, "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			checkFieldError(t, tt.parse(), tt.wantErr, tt.field, tt.code)
		})
	}
}

// The same bad value gets the same field and code whether the library
// validates it or the consumer decodes it from a header.
func TestSameCodeEverywhere(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		fields spool.TaskFields
		header nats.Header
	}{
		{"retries", spool.TaskFields{Meta: spool.Meta{MaxRetries: new(5000)}}, nats.Header{"Spool-Max-Retries": {"5000"}}},
		{"timeout", spool.TaskFields{Meta: spool.Meta{Timeout: 48 * time.Hour}}, nats.Header{"Spool-Timeout": {"48h"}}},
		{"unique", spool.TaskFields{Meta: spool.Meta{UniqueKey: "k"}}, nats.Header{"Spool-Unique-Key": {"k"}}},
		{"id", spool.TaskFields{Meta: spool.Meta{ID: "a*"}}, nats.Header{"Spool-Task-Id": {"a*"}}},
		{"result policy", spool.TaskFields{Meta: spool.Meta{Result: "never"}}, nats.Header{"Spool-Result": {"never"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tt.fields.Type, tt.fields.Priority = "a", spool.Normal
			var lib, dec *spool.FieldError
			_, decErr := spool.DecodeMeta(tt.header)
			if !errors.As(tt.fields.Validate(), &lib) || !errors.As(decErr, &dec) {
				t.Fatalf("library %v, consumer %v: want two *FieldError", tt.fields.Validate(), decErr)
			}
			if lib.Field != dec.Field || lib.Code != dec.Code {
				t.Fatalf("library %s/%s, consumer %s/%s", lib.Field, lib.Code, dec.Field, dec.Code)
			}
		})
	}
}
