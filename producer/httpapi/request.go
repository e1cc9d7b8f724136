package httpapi

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"strings"

	"github.com/spoolq/spool/producer"
	spool "github.com/spoolq/spool/shared"
)

// TaskRequest is the JSON body of POST /v1/tasks and one item of a batch.
// Only type is required.
type TaskRequest struct {
	// Type of the task ("email.send").
	Type string `json:"type"`
	// Priority: critical, high, normal (default), low or idle.
	Priority string `json:"priority,omitempty"`
	// Payload is any JSON value, stored as its raw JSON bytes.
	Payload json.RawMessage `json:"payload,omitempty"`
	// PayloadBase64 is a binary payload, standard base64. Set at most one
	// of Payload and PayloadBase64.
	PayloadBase64 *string `json:"payload_base64,omitempty"`
	// ID is the task id; default a new time-ordered id.
	ID string `json:"id,omitempty"`
	// MaxRetries after the first attempt; default the consumer's (3).
	MaxRetries *int `json:"max_retries,omitempty"`
	// Timeout per attempt, a Go duration ("30s").
	Timeout string `json:"timeout,omitempty"`
	// UniqueKey and UniqueTTL (a Go duration, at least 1s) make the task
	// unique while the key lives.
	UniqueKey string `json:"unique_key,omitempty"`
	UniqueTTL string `json:"unique_ttl,omitempty"`
	// Key is the flow-control key (Spool-Key) per-key limits count the
	// task under, such as a customer id.
	Key string `json:"key,omitempty"`
	// ProcessAt (RFC 3339) or Delay (a Go duration) delay the task.
	ProcessAt string `json:"process_at,omitempty"`
	Delay     string `json:"delay,omitempty"`
	// Headers are extra headers carried with the task.
	Headers map[string]string `json:"headers,omitempty"`
	// TraceParent and TraceState are the W3C trace context; when absent,
	// the request's traceparent and tracestate headers are used.
	TraceParent string `json:"traceparent,omitempty"`
	TraceState  string `json:"tracestate,omitempty"`
}

// BatchRequest is the JSON body of POST /v1/tasks/batch.
type BatchRequest struct {
	Tasks []json.RawMessage `json:"tasks"`
}

// task converts the request into a producer.Task. A malformed field is a
// *spool.FieldError naming it, with the code the library gives the same
// value; the library checks the rest when it enqueues.
func (tr TaskRequest) task(r *http.Request) (producer.Task, error) {
	t := producer.Task{
		Type:        tr.Type,
		ID:          tr.ID,
		MaxRetries:  tr.MaxRetries,
		UniqueKey:   tr.UniqueKey,
		Key:         tr.Key,
		Headers:     tr.Headers,
		TraceParent: tr.TraceParent,
		TraceState:  tr.TraceState,
	}
	if t.TraceParent == "" && r != nil {
		t.TraceParent, t.TraceState = r.Header.Get("traceparent"), r.Header.Get("tracestate")
	}
	if tr.Priority != "" {
		p, err := spool.ParsePriority(tr.Priority)
		if err != nil {
			return t, spool.NewFieldError("priority", err)
		}
		t.Priority = &p
	}
	if len(tr.Payload) > 0 && tr.PayloadBase64 != nil {
		return t, spool.NewFieldError("payload", fmt.Errorf("%w: set payload or payload_base64, not both", spool.ErrInvalidPayload))
	}
	if tr.PayloadBase64 != nil {
		b, err := base64.StdEncoding.DecodeString(*tr.PayloadBase64)
		if err != nil {
			return t, spool.NewFieldError("payload_base64", fmt.Errorf("%w: not standard base64: %w", spool.ErrInvalidPayload, err))
		}
		t.Payload = b
	} else if len(tr.Payload) > 0 && !bytes.Equal(tr.Payload, []byte("null")) {
		t.Payload = []byte(tr.Payload)
	}
	var err error
	if t.Timeout, err = spool.ParseDuration("timeout", tr.Timeout); err != nil {
		return t, err
	}
	if t.UniqueTTL, err = spool.ParseDuration("unique_ttl", tr.UniqueTTL); err != nil {
		return t, err
	}
	if t.Delay, err = spool.ParseDuration("delay", tr.Delay); err != nil {
		return t, err
	}
	if t.ProcessAt, err = spool.ParseProcessAt(tr.ProcessAt); err != nil {
		return t, err
	}
	return t, nil
}

// decodeJSON decodes exactly one JSON value from data into v, rejecting
// unknown fields, and names the field at fault.
func decodeJSON(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return jsonError(err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return newError(http.StatusBadRequest, CodeInvalidJSON, "", "the body holds more than one JSON value")
	}
	return nil
}

func jsonError(err error) error {
	var typeErr *json.UnmarshalTypeError
	var syntaxErr *json.SyntaxError
	switch {
	case errors.As(err, &typeErr):
		if typeErr.Field == "" {
			return newError(http.StatusBadRequest, CodeInvalidJSON, "",
				fmt.Sprintf("the body must be a JSON object, not %s", article(typeErr.Value)))
		}
		return newError(http.StatusBadRequest, CodeInvalidJSON, typeErr.Field,
			fmt.Sprintf("%s: must be %s, not %s", typeErr.Field, jsonKind(typeErr.Type), article(typeErr.Value)))
	case errors.As(err, &syntaxErr):
		return newError(http.StatusBadRequest, CodeInvalidJSON, "",
			fmt.Sprintf("malformed JSON at byte %d: %s", syntaxErr.Offset, strings.TrimPrefix(syntaxErr.Error(), "json: ")))
	case errors.Is(err, io.EOF):
		return newError(http.StatusBadRequest, CodeInvalidJSON, "", "empty body")
	case errors.Is(err, io.ErrUnexpectedEOF):
		return newError(http.StatusBadRequest, CodeInvalidJSON, "", "the body ends in the middle of a JSON value")
	}
	msg := err.Error()
	if name, ok := strings.CutPrefix(msg, "json: unknown field "); ok {
		field := strings.Trim(name, `"`)
		return newError(http.StatusBadRequest, CodeInvalidJSON, field, fmt.Sprintf("unknown field %q", field))
	}
	return newError(http.StatusBadRequest, CodeInvalidJSON, "", msg)
}

// jsonKind says which JSON value a Go type takes, in JSON's words.
func jsonKind(t reflect.Type) string {
	if t == nil {
		return "another JSON value"
	}
	switch t.Kind() {
	case reflect.Pointer:
		return jsonKind(t.Elem())
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "a whole number"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Slice, reflect.Array:
		return "an array"
	case reflect.Map, reflect.Struct:
		return "an object"
	}
	return "another JSON value"
}

// article puts "a" or "an" before the JSON kind encoding/json reports
// ("string", "number -1.5", "array", "object").
func article(v string) string {
	kind, _, _ := strings.Cut(v, " ")
	switch kind {
	case "array", "object":
		return "an " + kind
	case "bool":
		return "true or false"
	}
	return "a " + kind
}

// readBody reads the whole body within the size limit.
func readBody(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, error) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	var tooBig *http.MaxBytesError
	if errors.As(err, &tooBig) {
		return nil, newError(http.StatusRequestEntityTooLarge, CodeBodyTooLarge, "",
			fmt.Sprintf("request body over the limit of %d bytes", tooBig.Limit))
	}
	if err != nil {
		return nil, newError(http.StatusBadRequest, CodeInvalidJSON, "", "reading the body: "+err.Error())
	}
	return body, nil
}
