package httpapi

import (
	"net/http"
	"time"

	spool "github.com/spoolq/spool/shared"
)

// CodeInvalidPause: the for or until parameter of a pause is malformed.
const CodeInvalidPause = "invalid_pause"

// routePause registers the fleet-wide pause and resume of a priority.
func (h *handler) routePause(mux *http.ServeMux) {
	mux.Handle("POST /v1/priorities/{priority}/pause", h.auth(h.pausePriority))
	mux.Handle("POST /v1/priorities/{priority}/resume", h.auth(h.resumePriority))
}

// pauseState is the answer to a pause or a resume.
type pauseState struct {
	Priority    spool.Priority `json:"priority"`
	Paused      bool           `json:"paused"`
	PausedUntil *time.Time     `json:"paused_until,omitempty"`
}

func (h *handler) pausePriority(w http.ResponseWriter, r *http.Request) {
	p, err := spool.ParsePriority(r.PathValue("priority"))
	if err != nil {
		writeError(w, h.logger, r, newError(http.StatusBadRequest, CodeInvalidPriority, "priority", err.Error()))
		return
	}
	q := r.URL.Query()
	var until time.Time
	switch forS, untilS := q.Get("for"), q.Get("until"); {
	case forS != "" && untilS != "":
		writeError(w, h.logger, r, newError(http.StatusBadRequest, CodeInvalidPause, "for", "give for or until, not both"))
		return
	case forS != "":
		d, err := time.ParseDuration(forS)
		if err != nil || d <= 0 {
			writeError(w, h.logger, r, newError(http.StatusBadRequest, CodeInvalidPause, "for", "for must be a positive Go duration such as 30m or 2h"))
			return
		}
		until = time.Now().Add(d)
	case untilS != "":
		t, err := time.Parse(time.RFC3339, untilS)
		if err != nil || !t.After(time.Now()) {
			writeError(w, h.logger, r, newError(http.StatusBadRequest, CodeInvalidPause, "until", "until must be a future RFC 3339 time such as 2026-11-25T18:00:00Z"))
			return
		}
		until = t
	}
	got, err := h.admin.PausePriority(r.Context(), p, until)
	if err != nil {
		writeError(w, h.logger, r, newError(http.StatusServiceUnavailable, CodeUnavailable, "", err.Error()))
		return
	}
	h.overviews.invalidate()
	writeJSON(w, h.logger, r, http.StatusOK, pauseState{Priority: p, Paused: true, PausedUntil: &got})
}

func (h *handler) resumePriority(w http.ResponseWriter, r *http.Request) {
	p, err := spool.ParsePriority(r.PathValue("priority"))
	if err != nil {
		writeError(w, h.logger, r, newError(http.StatusBadRequest, CodeInvalidPriority, "priority", err.Error()))
		return
	}
	if err := h.admin.ResumePriority(r.Context(), p); err != nil {
		writeError(w, h.logger, r, newError(http.StatusServiceUnavailable, CodeUnavailable, "", err.Error()))
		return
	}
	h.overviews.invalidate()
	writeJSON(w, h.logger, r, http.StatusOK, pauseState{Priority: p})
}
