package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"

	spool "github.com/spoolq/spool/shared"
	"github.com/spoolq/spool/streams/admin"
)

// CodeInvalidSchedule: a schedule's name, spec or time zone is malformed.
const CodeInvalidSchedule = "invalid_schedule"

// ScheduleRequest is the JSON body of PUT /v1/schedules/{name}.
type ScheduleRequest struct {
	// Spec: "@every 30s", a 5- or 6-field cron, or @hourly, @daily, ….
	Spec string `json:"spec"`
	// TimeZone is an IANA zone for cron specs; default UTC.
	TimeZone string `json:"time_zone,omitempty"`
	Type     string `json:"type"`
	// Priority: critical, high, normal (default), low or idle.
	Priority string `json:"priority,omitempty"`
	// Payload is any JSON value, stored as its raw JSON bytes.
	Payload    json.RawMessage   `json:"payload,omitempty"`
	MaxRetries *int              `json:"max_retries,omitempty"`
	Timeout    string            `json:"timeout,omitempty"`
	Headers    map[string]string `json:"headers,omitempty"`
}

// scheduleDoc is a schedule as the broker shows it: the payload as JSON
// when it is JSON, else as result documents store output (payload_encoding
// says how).
type scheduleDoc struct {
	admin.Schedule
	Payload         json.RawMessage `json:"payload,omitempty"`
	PayloadEncoding string          `json:"payload_encoding,omitempty"`
}

func toDoc(s admin.Schedule) scheduleDoc {
	d := scheduleDoc{Schedule: s}
	d.Payload, d.PayloadEncoding = spool.ResultValue(s.Payload)
	return d
}

func (h *handler) routeSchedules(mux *http.ServeMux) {
	mux.Handle("GET /v1/schedules", h.auth(h.listSchedules))
	mux.Handle("GET /v1/schedules/{name}", h.auth(h.getSchedule))
	mux.Handle("PUT /v1/schedules/{name}", h.auth(h.setSchedule))
	mux.Handle("DELETE /v1/schedules/{name}", h.auth(h.deleteSchedule))
	mux.Handle("POST /v1/schedules/{name}/pause", h.auth(h.switchSchedule(true)))
	mux.Handle("POST /v1/schedules/{name}/resume", h.auth(h.switchSchedule(false)))
}

// scheduleError maps the admin client's errors: a bad name or spec is 400
// invalid_schedule, an unknown name 404.
func scheduleError(err error) *apiError {
	var fe *spool.FieldError
	switch {
	case errors.Is(err, admin.ErrScheduleNotFound):
		return newError(http.StatusNotFound, CodeNotFound, "name", err.Error())
	case errors.As(err, &fe) && (fe.Field == "name" || fe.Field == "spec"):
		field := fe.Field
		return newError(http.StatusBadRequest, CodeInvalidSchedule, field, err.Error())
	}
	return fromError(err)
}

func (h *handler) listSchedules(w http.ResponseWriter, r *http.Request) {
	list, err := h.admin.Schedules(r.Context())
	if err != nil {
		writeError(w, h.logger, r, scheduleError(err))
		return
	}
	docs := make([]scheduleDoc, 0, len(list))
	for _, s := range list {
		docs = append(docs, toDoc(s))
	}
	writeJSON(w, h.logger, r, http.StatusOK, map[string]any{"schedules": docs})
}

func (h *handler) getSchedule(w http.ResponseWriter, r *http.Request) {
	s, err := h.admin.GetSchedule(r.Context(), r.PathValue("name"))
	if err != nil {
		writeError(w, h.logger, r, scheduleError(err))
		return
	}
	writeJSON(w, h.logger, r, http.StatusOK, toDoc(s))
}

func (h *handler) setSchedule(w http.ResponseWriter, r *http.Request) {
	body, err := readBody(w, r, h.opts.MaxBody)
	if err != nil {
		writeError(w, h.logger, r, fromError(err))
		return
	}
	var req ScheduleRequest
	if err := decodeJSON(body, &req); err != nil {
		writeError(w, h.logger, r, fromError(err))
		return
	}
	s := admin.Schedule{Name: r.PathValue("name"), Spec: req.Spec, TimeZone: req.TimeZone, Type: req.Type,
		Priority: spool.Normal, MaxRetries: req.MaxRetries, Headers: req.Headers}
	if req.Priority != "" {
		if s.Priority, err = spool.ParsePriority(req.Priority); err != nil {
			writeError(w, h.logger, r, fromError(spool.NewFieldError("priority", err)))
			return
		}
	}
	if len(req.Payload) > 0 && !bytes.Equal(req.Payload, []byte("null")) {
		s.Payload = []byte(req.Payload)
	}
	if s.Timeout, err = spool.ParseDuration("timeout", req.Timeout); err != nil {
		writeError(w, h.logger, r, fromError(err))
		return
	}
	if err := h.admin.SetSchedule(r.Context(), s); err != nil {
		writeError(w, h.logger, r, scheduleError(err))
		return
	}
	h.getSchedule(w, r)
}

func (h *handler) deleteSchedule(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	if err := h.admin.DeleteSchedule(r.Context(), name); err != nil {
		writeError(w, h.logger, r, scheduleError(err))
		return
	}
	writeJSON(w, h.logger, r, http.StatusOK, map[string]any{"name": name, "deleted": true})
}

func (h *handler) switchSchedule(pause bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		name := r.PathValue("name")
		var err error
		if pause {
			err = h.admin.PauseSchedule(r.Context(), name)
		} else {
			err = h.admin.ResumeSchedule(r.Context(), name)
		}
		if err != nil {
			writeError(w, h.logger, r, scheduleError(err))
			return
		}
		h.getSchedule(w, r)
	}
}
