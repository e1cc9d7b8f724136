package httpapi

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"

	spool "github.com/spoolq/spool/shared"
	"github.com/spoolq/spool/streams/dlq"
)

// routeDLQ adds the dead-letter routes, behind the token like the task
// routes.
func (h *handler) routeDLQ(mux *http.ServeMux) {
	mux.Handle("GET /v1/dlq", h.auth(h.dlqList))
	mux.Handle("DELETE /v1/dlq", h.auth(h.dlqPurge))
	mux.Handle("GET /v1/dlq/{seq}", h.auth(h.dlqGet))
	mux.Handle("POST /v1/dlq/{seq}/replay", h.auth(h.dlqReplay))
	mux.HandleFunc("/v1/dlq", h.notAllowed("GET, DELETE"))
	mux.HandleFunc("/v1/dlq/{seq}", h.notAllowed("GET"))
	mux.HandleFunc("/v1/dlq/{seq}/replay", h.notAllowed("POST"))
}

// dlqFilter reads the dead-letter filter from the query: priority, type,
// reason, since, until (RFC 3339, or a Go duration meaning that long ago),
// limit and after.
func dlqFilter(q url.Values, now time.Time) (dlq.Filter, *apiError) {
	var f dlq.Filter
	bad := func(field, msg string) (dlq.Filter, *apiError) {
		return f, newError(http.StatusBadRequest, CodeInvalidFilter, field, msg)
	}
	if v := q.Get("priority"); v != "" {
		p, err := spool.ParsePriority(v)
		if err != nil {
			return bad("priority", "priority: "+spool.NewFieldError("priority", err).Reason())
		}
		f.Priority = &p
	}
	f.Type = q.Get("type")
	f.Reason = spool.Reason(q.Get("reason"))
	for _, t := range []struct {
		name string
		dst  *time.Time
	}{{"since", &f.Since}, {"until", &f.Until}} {
		v := q.Get(t.name)
		if v == "" {
			continue
		}
		if ts, err := time.Parse(time.RFC3339Nano, v); err == nil {
			*t.dst = ts
			continue
		}
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 {
			return bad(t.name, fmt.Sprintf("%s %q is neither an RFC 3339 time nor a positive duration", t.name, v))
		}
		*t.dst = now.Add(-d)
	}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > dlq.MaxLimit {
			return bad("limit", fmt.Sprintf("limit %q must be 1 to %d", v, dlq.MaxLimit))
		}
		f.Limit = n
	}
	if v := q.Get("after"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return bad("after", fmt.Sprintf("after %q is not a sequence", v))
		}
		f.After = n
	}
	if err := f.Validate(); err != nil {
		return bad("", err.Error())
	}
	return f, nil
}

// dlqError maps the dlq package's errors.
func dlqError(err error) *apiError {
	switch {
	case errors.Is(err, dlq.ErrNotFound):
		return newError(http.StatusNotFound, CodeNotFound, "seq", err.Error())
	case errors.Is(err, dlq.ErrInvalidFilter):
		return newError(http.StatusBadRequest, CodeInvalidFilter, "", err.Error())
	case errors.Is(err, dlq.ErrNoFilter):
		return newError(http.StatusBadRequest, CodeFilterRequired, "", err.Error())
	case errors.Is(err, dlq.ErrNotReplayable):
		return newError(http.StatusConflict, CodeNotReplayable, "seq", err.Error())
	}
	return newError(http.StatusServiceUnavailable, CodeUnavailable, "", err.Error())
}

func seqParam(r *http.Request) (uint64, *apiError) {
	v := r.PathValue("seq")
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil || n == 0 {
		return 0, newError(http.StatusBadRequest, CodeInvalidSeq, "seq", fmt.Sprintf("%q is not a dead-letter sequence", v))
	}
	return n, nil
}

func (h *handler) dlqList(w http.ResponseWriter, r *http.Request) {
	f, e := dlqFilter(r.URL.Query(), time.Now())
	if e != nil {
		writeError(w, h.logger, r, e)
		return
	}
	page, err := h.admin.DeadLetters(r.Context(), f)
	if err != nil {
		writeError(w, h.logger, r, dlqError(err))
		return
	}
	if page.Letters == nil {
		page.Letters = []dlq.Letter{}
	}
	writeJSON(w, h.logger, r, http.StatusOK, page)
}

func (h *handler) dlqGet(w http.ResponseWriter, r *http.Request) {
	seq, e := seqParam(r)
	if e != nil {
		writeError(w, h.logger, r, e)
		return
	}
	l, err := h.admin.DeadLetter(r.Context(), seq)
	if err != nil {
		writeError(w, h.logger, r, dlqError(err))
		return
	}
	writeJSON(w, h.logger, r, http.StatusOK, l)
}

func (h *handler) dlqReplay(w http.ResponseWriter, r *http.Request) {
	seq, e := seqParam(r)
	if e != nil {
		writeError(w, h.logger, r, e)
		return
	}
	res, err := h.admin.Replay(r.Context(), seq)
	if err != nil {
		writeError(w, h.logger, r, dlqError(err))
		return
	}
	h.logger.InfoContext(r.Context(), "dead letter replayed", "seq", seq, "task_id", res.TaskID, "subject", res.Subject)
	writeJSON(w, h.logger, r, http.StatusOK, res)
}

func (h *handler) dlqPurge(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	f, e := dlqFilter(q, time.Now())
	if e != nil {
		writeError(w, h.logger, r, e)
		return
	}
	all := false
	if v := q.Get("all"); v != "" {
		var err error
		if all, err = strconv.ParseBool(v); err != nil {
			writeError(w, h.logger, r, newError(http.StatusBadRequest, CodeInvalidFilter, "all", fmt.Sprintf("all %q is not a boolean", v)))
			return
		}
	}
	if all && f.Selects() {
		writeError(w, h.logger, r, newError(http.StatusBadRequest, CodeInvalidFilter, "all", "all=true and a filter exclude each other"))
		return
	}
	n, err := h.admin.Purge(r.Context(), f, all)
	if err != nil {
		writeError(w, h.logger, r, dlqError(err))
		return
	}
	h.logger.InfoContext(r.Context(), "dead letters purged", "count", n, "all", all)
	writeJSON(w, h.logger, r, http.StatusOK, map[string]uint64{"purged": n})
}
