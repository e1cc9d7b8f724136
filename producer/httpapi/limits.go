package httpapi

import (
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/spoolq/spool/shared/limits"
)

// CodeInvalidLimit answers a flow-control rule that does not hold.
const CodeInvalidLimit = "invalid_limit"

// maxRuleBody bounds a rule document.
const maxRuleBody = 64 << 10

// routeLimits adds the flow-control routes, behind the token like the task
// routes.
func (h *handler) routeLimits(mux *http.ServeMux) {
	mux.Handle("GET /v1/limits", h.auth(h.limitsList))
	mux.Handle("PUT /v1/limits/{type}", h.auth(h.limitPut))
	mux.Handle("DELETE /v1/limits/{type}", h.auth(h.limitDelete))
	mux.HandleFunc("/v1/limits", h.notAllowed("GET"))
	mux.HandleFunc("/v1/limits/{type}", h.notAllowed("PUT, DELETE"))
}

func limitError(err error) *apiError {
	if errors.Is(err, limits.ErrInvalidRule) {
		return newError(http.StatusBadRequest, CodeInvalidLimit, "", err.Error())
	}
	return newError(http.StatusServiceUnavailable, CodeUnavailable, "", err.Error())
}

func (h *handler) limitsList(w http.ResponseWriter, r *http.Request) {
	u, err := h.admin.Limits(r.Context())
	if err != nil {
		writeError(w, h.logger, r, limitError(err))
		return
	}
	if u == nil {
		u = []limits.Usage{}
	}
	writeJSON(w, h.logger, r, http.StatusOK, map[string]any{"limits": u})
}

func (h *handler) limitPut(w http.ResponseWriter, r *http.Request) {
	typ := r.PathValue("type")
	body, err := io.ReadAll(io.LimitReader(r.Body, maxRuleBody+1))
	if err != nil {
		writeError(w, h.logger, r, newError(http.StatusBadRequest, CodeInvalidJSON, "", "reading the body: "+err.Error()))
		return
	}
	if len(body) > maxRuleBody {
		writeError(w, h.logger, r, newError(http.StatusRequestEntityTooLarge, CodeBodyTooLarge, "", fmt.Sprintf("a rule is at most %d bytes", maxRuleBody)))
		return
	}
	rule, err := limits.Decode(typ, body)
	if err != nil {
		writeError(w, h.logger, r, limitError(err))
		return
	}
	if err := h.admin.SetLimit(r.Context(), rule); err != nil {
		writeError(w, h.logger, r, limitError(err))
		return
	}
	h.logger.InfoContext(r.Context(), "flow-control rule set", "type", rule.Type)
	writeJSON(w, h.logger, r, http.StatusOK, rule)
}

func (h *handler) limitDelete(w http.ResponseWriter, r *http.Request) {
	typ := r.PathValue("type")
	if err := h.admin.DeleteLimit(r.Context(), typ); err != nil {
		writeError(w, h.logger, r, limitError(err))
		return
	}
	h.logger.InfoContext(r.Context(), "flow-control rule removed", "type", typ)
	w.WriteHeader(http.StatusNoContent)
}
