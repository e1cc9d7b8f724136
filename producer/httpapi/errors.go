package httpapi

import (
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"strconv"

	"github.com/spoolq/spool/producer"
)

// Error codes of the API. They are stable: clients may switch on them.
const (
	CodeInvalidJSON       = "invalid_json"
	CodeInvalidPriority   = "invalid_priority"
	CodeInvalidType       = "invalid_type"
	CodeInvalidID         = "invalid_id"
	CodeInvalidHeader     = "invalid_header"
	CodeInvalidMaxRetries = "invalid_max_retries"
	CodeInvalidTimeout    = "invalid_timeout"
	CodeInvalidUnique     = "invalid_unique"
	CodeInvalidDelay      = "invalid_delay"
	CodeInvalidPayload    = "invalid_payload"
	CodeInvalidWait       = "invalid_wait"
	CodePayloadTooLarge   = "payload_too_large"
	CodeBodyTooLarge      = "body_too_large"
	CodeBatchTooLarge     = "batch_too_large"
	CodeUnauthorized      = "unauthorized"
	CodeNotFound          = "not_found"
	CodeMethodNotAllowed  = "method_not_allowed"
	CodeDuplicateUnique   = "duplicate_unique"
	CodeQueueFull         = "queue_full"
	CodeUnavailable       = "unavailable"
	CodeInvalidFilter     = "invalid_filter"
	CodeFilterRequired    = "filter_required"
	CodeInvalidSeq        = "invalid_seq"
	CodeNotReplayable     = "not_replayable"
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
}

type errorBody struct {
	Error *apiError `json:"error"`
}

func newError(status int, code, field, msg string) *apiError {
	return &apiError{Status: status, Code: code, Field: field, Message: msg}
}

// sentinelCodes maps the library's validation sentinels to codes, most
// specific first (the header kinds also match ErrInvalidHeader).
var sentinelCodes = []struct {
	err    error
	status int
	code   string
}{
	{producer.ErrInvalidPriority, http.StatusBadRequest, CodeInvalidPriority},
	{producer.ErrInvalidType, http.StatusBadRequest, CodeInvalidType},
	{producer.ErrInvalidID, http.StatusBadRequest, CodeInvalidID},
	{producer.ErrInvalidMaxRetries, http.StatusBadRequest, CodeInvalidMaxRetries},
	{producer.ErrInvalidTimeout, http.StatusBadRequest, CodeInvalidTimeout},
	{producer.ErrInvalidUnique, http.StatusBadRequest, CodeInvalidUnique},
	{producer.ErrInvalidDelay, http.StatusBadRequest, CodeInvalidDelay},
	{producer.ErrInvalidHeader, http.StatusBadRequest, CodeInvalidHeader},
	{producer.ErrPayloadTooLarge, http.StatusRequestEntityTooLarge, CodePayloadTooLarge},
	{producer.ErrQueueFull, http.StatusServiceUnavailable, CodeQueueFull},
	{producer.ErrTaskNotFound, http.StatusNotFound, CodeNotFound},
	{producer.ErrNotProvisioned, http.StatusServiceUnavailable, CodeUnavailable},
}

// fromError turns a library error into an API error.
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
	field := ""
	var inv *producer.InvalidTaskError
	if errors.As(err, &inv) {
		field = inv.Field
	}
	for _, s := range sentinelCodes {
		if errors.Is(err, s.err) {
			return newError(s.status, s.code, field, err.Error())
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
