package httpapi

import (
	"net/http"
	"time"

	spool "github.com/spoolq/spool/shared"
	"github.com/spoolq/spool/streams/admin"
)

// CodeInvalidPause: the for or until parameter of a pause is malformed.
const CodeInvalidPause = "invalid_pause"

// routePause registers the fleet-wide pause and resume of a priority and
// of a task type, and the list of paused types.
func (h *handler) routePause(mux *http.ServeMux) {
	mux.Handle("POST /v1/priorities/{priority}/pause", h.auth(h.pausePriority))
	mux.Handle("POST /v1/priorities/{priority}/resume", h.auth(h.resumePriority))
	mux.Handle("GET /v1/types", h.auth(h.listTypes))
	mux.Handle("POST /v1/types/{type}/pause", h.auth(h.pauseType))
	mux.Handle("POST /v1/types/{type}/resume", h.auth(h.resumeType))
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
	until, perr := pauseEnd(r)
	if perr != nil {
		writeError(w, h.logger, r, perr)
		return
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

// pauseEnd reads the for or until parameter of a pause: zero when neither
// is given (until resumed).
func pauseEnd(r *http.Request) (time.Time, *apiError) {
	q := r.URL.Query()
	switch forS, untilS := q.Get("for"), q.Get("until"); {
	case forS != "" && untilS != "":
		return time.Time{}, newError(http.StatusBadRequest, CodeInvalidPause, "for", "give for or until, not both")
	case forS != "":
		d, err := time.ParseDuration(forS)
		if err != nil || d <= 0 {
			return time.Time{}, newError(http.StatusBadRequest, CodeInvalidPause, "for", "for must be a positive Go duration such as 30m or 2h")
		}
		return time.Now().Add(d), nil
	case untilS != "":
		t, err := time.Parse(time.RFC3339, untilS)
		if err != nil || !t.After(time.Now()) {
			return time.Time{}, newError(http.StatusBadRequest, CodeInvalidPause, "until", "until must be a future RFC 3339 time such as 2026-11-25T18:00:00Z")
		}
		return t, nil
	}
	return time.Time{}, nil
}

// typePauseState is the answer to a type's pause or resume.
type typePauseState struct {
	Type   string           `json:"type"`
	Paused bool             `json:"paused"`
	Pause  *spool.TypePause `json:"pause,omitempty"`
}

func (h *handler) pauseType(w http.ResponseWriter, r *http.Request) {
	typ := r.PathValue("type")
	if err := spool.ValidateType(typ); err != nil {
		writeError(w, h.logger, r, newError(http.StatusBadRequest, CodeInvalidType, "type", err.Error()))
		return
	}
	until, perr := pauseEnd(r)
	if perr != nil {
		writeError(w, h.logger, r, perr)
		return
	}
	q := r.URL.Query()
	by := q.Get("by")
	if by == "" {
		by = "broker"
	}
	tp, err := h.admin.PauseType(r.Context(), typ, admin.TypePauseOptions{Until: until, By: by, Reason: q.Get("reason")})
	if err != nil {
		writeError(w, h.logger, r, newError(http.StatusServiceUnavailable, CodeUnavailable, "", err.Error()))
		return
	}
	h.overviews.invalidate()
	writeJSON(w, h.logger, r, http.StatusOK, typePauseState{Type: typ, Paused: true, Pause: &tp})
}

func (h *handler) resumeType(w http.ResponseWriter, r *http.Request) {
	typ := r.PathValue("type")
	if err := spool.ValidateType(typ); err != nil {
		writeError(w, h.logger, r, newError(http.StatusBadRequest, CodeInvalidType, "type", err.Error()))
		return
	}
	if err := h.admin.ResumeType(r.Context(), typ); err != nil {
		writeError(w, h.logger, r, newError(http.StatusServiceUnavailable, CodeUnavailable, "", err.Error()))
		return
	}
	h.overviews.invalidate()
	writeJSON(w, h.logger, r, http.StatusOK, typePauseState{Type: typ})
}

// listTypes answers the types that are paused or have parked tasks.
func (h *handler) listTypes(w http.ResponseWriter, r *http.Request) {
	types, err := h.admin.Types(r.Context())
	if err != nil {
		writeError(w, h.logger, r, newError(http.StatusServiceUnavailable, CodeUnavailable, "", err.Error()))
		return
	}
	if types == nil {
		types = []admin.TypeStatus{}
	}
	writeJSON(w, h.logger, r, http.StatusOK, map[string]any{"types": types})
}
