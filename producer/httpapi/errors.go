package httpapi

import (
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"strconv"

	"github.com/spoolq/spool/producer"
	spool "github.com/spoolq/spool/shared"
	"github.com/spoolq/spool/shared/jsproto"
)

// Error codes of the API. They are stable: clients may switch on them.
// The codes of task fields are spool's, the same in the Go library, the
// CLI and the consumer.
const (
	CodeInvalidJSON         = "invalid_json"
	CodeInvalidPriority     = spool.CodeInvalidPriority
	CodeInvalidType         = spool.CodeInvalidType
	CodeInvalidID           = spool.CodeInvalidID
	CodeInvalidHeader       = spool.CodeInvalidHeader
	CodeInvalidMaxRetries   = spool.CodeInvalidMaxRetries
	CodeInvalidTimeout      = spool.CodeInvalidTimeout
	CodeInvalidUnique       = spool.CodeInvalidUnique
	CodeInvalidResultPolicy = spool.CodeInvalidResultPolicy
	CodeInvalidDelay        = spool.CodeInvalidDelay
	CodeInvalidPayload      = spool.CodeInvalidPayload
	CodeInvalidWait         = "invalid_wait"
	CodePayloadTooLarge     = spool.CodePayloadTooLarge
	CodeBodyTooLarge        = "body_too_large"
	CodeBatchTooLarge       = "batch_too_large"
	CodeUnauthorized        = "unauthorized"
	CodeNotFound            = "not_found"
	CodeMethodNotAllowed    = "method_not_allowed"
	CodeDuplicateUnique     = "duplicate_unique"
	CodeQueueFull           = "queue_full"
	CodeUnavailable         = "unavailable"
	CodeInvalidFilter       = "invalid_filter"
	CodeFilterRequired      = "filter_required"
	CodeInvalidSeq          = "invalid_seq"
	CodeNotReplayable       = "not_replayable"
	CodeTaskFinished        = "task_finished"
	CodeNotCompleted        = "not_completed"
	// CodeResultDiscarded (410): the task completed and its result was
	// discarded, so there is no document nor output to answer.
	CodeResultDiscarded = "result_discarded"
	CodeInvalidDocument = spool.CodeInvalidDocument
)

// retryAfter is the Retry-After (seconds) sent with 503 answers.
const retryAfter = 5

// apiError is the body of every error answer.
type apiError struct {
	Status     int    `json:"-"`
	Code       string `json:"code"`
	Message    string `json:"message"`
	Field      string `json:"field,omitempty"`
	ExistingID string `json:"existing_id,omitempty"`
	// State is the task's terminal state (task_finished,
	// result_discarded).
	State string `json:"state,omitempty"`
}

type errorBody struct {
	Error *apiError `json:"error"`
}

func newError(status int, code, field, msg string) *apiError {
	return &apiError{Status: status, Code: code, Field: field, Message: msg}
}

// sentinelCodes maps the library's errors that are not about a task's
// fields to codes.
var sentinelCodes = []struct {
	err    error
	status int
	code   string
}{
	{producer.ErrQueueFull, http.StatusServiceUnavailable, CodeQueueFull},
	{producer.ErrTaskNotFound, http.StatusNotFound, CodeNotFound},
	{producer.ErrResultDiscarded, http.StatusGone, CodeResultDiscarded},
	{producer.ErrNotProvisioned, http.StatusServiceUnavailable, CodeUnavailable},
	// A retry budget that ran out: the message says the cluster was
	// unavailable and for how long the broker tried.
	{jsproto.ErrUnavailable, http.StatusServiceUnavailable, CodeUnavailable},
}

// fromError turns a library error into an API error. A task field at fault
// keeps the field and code the library gave it (400, or 413 for a task too
// large).
func fromError(err error) *apiError {
	var ae *apiError
	if errors.As(err, &ae) {
		return ae
	}
	var conflict *producer.UniqueConflictError
	if errors.As(err, &conflict) {
		e := newError(http.StatusConflict, CodeDuplicateUnique, "unique_key", err.Error())
		e.ExistingID = conflict.ExistingID
		return e
	}
	if code := spool.ErrorCode(err); code != "" {
		field, msg := "", err.Error()
		var fe *spool.FieldError
		if errors.As(err, &fe) {
			field, msg = fe.Field, fe.Field+": "+fe.Reason()
		}
		status := http.StatusBadRequest
		if code == CodePayloadTooLarge {
			status = http.StatusRequestEntityTooLarge
		}
		return newError(status, code, field, msg)
	}
	// A stored document the broker cannot decode is not an outage: the
	// server answered with something a worker outside the contract wrote.
	var de *spool.DocumentError
	if errors.As(err, &de) {
		return newError(http.StatusBadGateway, CodeInvalidDocument, de.Field, err.Error())
	}
	for _, s := range sentinelCodes {
		if errors.Is(err, s.err) {
			e := newError(s.status, s.code, "", err.Error())
			if s.code == CodeResultDiscarded {
				e.State = string(spool.StateCompleted)
			}
			return e
		}
	}
	return newError(http.StatusServiceUnavailable, CodeUnavailable, "", err.Error())
}

func (e *apiError) Error() string { return e.Code + ": " + e.Message }

// writeError sends e as JSON, with Retry-After on 503.
func writeError(w http.ResponseWriter, logger *slog.Logger, r *http.Request, e *apiError) {
	if e.Status == http.StatusServiceUnavailable {
		w.Header().Set("Retry-After", strconv.Itoa(retryAfter))
	}
	if e.Status >= 500 {
		logger.WarnContext(r.Context(), "request failed", "method", r.Method, "path", r.URL.Path, "code", e.Code, "error", e.Message)
	}
	writeJSON(w, logger, r, e.Status, errorBody{Error: e})
}

func writeJSON(w http.ResponseWriter, logger *slog.Logger, r *http.Request, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		logger.ErrorContext(r.Context(), "encoding response", "error", err)
		http.Error(w, `{"error":{"code":"internal","message":"encoding the response failed"}}`, http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	b = append(b, '\n')
	if _, err := w.Write(b); err != nil {
		logger.DebugContext(r.Context(), "writing response", "error", err)
	}
}
