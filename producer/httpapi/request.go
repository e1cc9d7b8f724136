package httpapi

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"

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
	// ResultPolicy (Spool-Result) is "discard" to keep no result document
	// when the task completes, or "keep" to keep it where the worker
	// discards the type's results; absent: the worker's rule.
	ResultPolicy string `json:"result_policy,omitempty"`
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
		Type:         tr.Type,
		ID:           tr.ID,
		MaxRetries:   tr.MaxRetries,
		UniqueKey:    tr.UniqueKey,
		Key:          tr.Key,
		ResultPolicy: spool.ResultPolicy(tr.ResultPolicy),
		Headers:      tr.Headers,
		TraceParent:  tr.TraceParent,
		TraceState:   tr.TraceState,
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
// unknown fields, with the check spool.DecodeJSON makes for every JSON
// Spool reads, and answers invalid_json naming the field at fault.
func decodeJSON(data []byte, v any) error {
	err := spool.DecodeJSON("the body", data, v)
	var je *spool.JSONError
	if errors.As(err, &je) {
		return newError(http.StatusBadRequest, CodeInvalidJSON, je.Field, je.Msg)
	}
	return err
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
