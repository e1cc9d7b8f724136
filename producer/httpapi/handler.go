package httpapi

import (
	"context"
	"crypto/subtle"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"

	"github.com/spoolq/spool/producer"
	spool "github.com/spoolq/spool/shared"
	"github.com/spoolq/spool/shared/logging"
	"github.com/spoolq/spool/streams/admin"
)

//go:embed openapi.json
var openAPI []byte

// Defaults of Options.
const (
	// DefaultMaxBody is the request body limit: 2 MiB.
	DefaultMaxBody = 2 << 20
	// DefaultMaxBatch is the most tasks one batch request may hold.
	DefaultMaxBatch = 10_000
	// DefaultMaxWait caps ?wait= on GET /v1/tasks/{id}; it stays under the
	// server's 15s write timeout.
	DefaultMaxWait = 10 * time.Second
)

// Options configure the handler. Zero fields take their defaults.
type Options struct {
	// Token, when set, is the bearer token every API route requires
	// (SPOOL_HTTP_TOKEN). Default: none, no authentication.
	Token string
	// MaxBody is the request body limit in bytes (SPOOL_HTTP_MAX_BODY).
	// Default DefaultMaxBody (2 MiB).
	MaxBody int64
	// MaxBatch is the most tasks in one batch. Default DefaultMaxBatch.
	MaxBatch int
	// MaxWait caps the ?wait= long poll. Default DefaultMaxWait (10s).
	MaxWait time.Duration
	// Logger receives request logs. Default: discard.
	Logger *slog.Logger
	// TracerProvider, when set, runs every enqueue in a span whose context
	// the task carries (producer.Traced); the caller's traceparent header
	// is its parent. Default: no spans (the caller's traceparent is still
	// carried to the task).
	TracerProvider trace.TracerProvider
	// Registry receives the broker's metrics, and GET /metrics serves it
	// (behind the token). Default: a registry of the handler's own. A
	// registry serves one handler.
	Registry *prometheus.Registry
}

func (o Options) withDefaults() Options {
	if o.MaxBody <= 0 {
		o.MaxBody = DefaultMaxBody
	}
	if o.MaxBatch <= 0 {
		o.MaxBatch = DefaultMaxBatch
	}
	if o.MaxWait <= 0 {
		o.MaxWait = DefaultMaxWait
	}
	if o.Logger == nil {
		o.Logger = logging.OrDefault(nil)
	}
	return o
}

// enqueuer is *producer.Client or *producer.TracedClient.
type enqueuer interface {
	Enqueue(ctx context.Context, task producer.Task, opts ...producer.EnqueueOption) (producer.EnqueueResult, error)
	EnqueueBatch(ctx context.Context, tasks []producer.Task) ([]producer.BatchResult, error)
}

type handler struct {
	client    *producer.Client
	admin     *admin.Client
	overviews *cached[admin.Overview]
	metrics   *brokerMetrics
	tasks     enqueuer
	opts      Options
	logger    *slog.Logger
}

// NewHandler returns the broker's routes: client publishes tasks and reads
// their results, adm serves the dashboard, the queue metrics and the
// dead-letter routes. Neither may be nil; build both on the same
// connection and names.
func NewHandler(client *producer.Client, adm *admin.Client, opts Options) http.Handler {
	if client == nil || adm == nil {
		panic("httpapi: NewHandler needs a producer client and an admin client")
	}
	opts = opts.withDefaults()
	h := &handler{client: client, admin: adm, tasks: client, opts: opts, logger: opts.Logger}
	h.overviews = newCached(OverviewCacheTTL, overviewTimeout, adm.Overview)
	if opts.TracerProvider != nil {
		h.tasks = producer.Traced(client, opts.TracerProvider)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", h.healthz)
	mux.HandleFunc("GET /readyz", h.readyz)
	mux.HandleFunc("GET /v1/openapi.json", h.openapi)
	mux.Handle("POST /v1/tasks", h.auth(h.enqueue))
	mux.Handle("POST /v1/tasks/batch", h.auth(h.batch))
	mux.Handle("GET /v1/tasks/{id}", h.auth(h.result))
	mux.Handle("DELETE /v1/tasks/{id}", h.auth(h.cancel))
	mux.Handle("GET /v1/tasks/{id}/result", h.auth(h.output))
	h.registerUI(mux) // dashboard: /ui, /v1/overview (ui.go)
	h.routeDLQ(mux)
	h.routePause(mux)
	h.routeSchedules(mux)
	h.routeWorkflows(mux)
	h.routeLimits(mux)
	h.routeMetrics(mux)
	// Known paths with a method they do not serve answer 405. Patterns
	// carry methods so they do not conflict with GET /v1/tasks/{id}.
	for _, m := range []struct{ pattern, allow string }{
		{"/v1/tasks", "POST"},
		{"/healthz", "GET"},
		{"/readyz", "GET"},
		{"/v1/openapi.json", "GET"},
		{"PUT /v1/tasks/{id}", "GET, DELETE"},
		{"PATCH /v1/tasks/{id}", "GET, DELETE"},
		{"POST /v1/tasks/{id}", "GET, DELETE"},
	} {
		mux.HandleFunc(m.pattern, h.notAllowed(m.allow))
	}
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, h.logger, r, newError(http.StatusNotFound, CodeNotFound, "", fmt.Sprintf("no route %s %s", r.Method, r.URL.Path)))
	})
	return h.instrument(h.logRequests(mux))
}

// notAllowed answers 405 for a known path, naming the allowed methods.
func (h *handler) notAllowed(allow string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Allow", allow)
		writeError(w, h.logger, r, newError(http.StatusMethodNotAllowed, CodeMethodNotAllowed, "",
			fmt.Sprintf("%s does not allow %s (allowed: %s)", r.URL.Path, r.Method, allow)))
	}
}

// auth requires the bearer token when one is configured.
func (h *handler) auth(next http.HandlerFunc) http.Handler {
	if h.opts.Token == "" {
		return next
	}
	want := []byte(h.opts.Token)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !ok || subtle.ConstantTimeCompare([]byte(got), want) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="spool"`)
			writeError(w, h.logger, r, newError(http.StatusUnauthorized, CodeUnauthorized, "", "missing or wrong bearer token"))
			return
		}
		next(w, r)
	})
}

type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (s *statusRecorder) WriteHeader(code int) {
	s.status = code
	s.ResponseWriter.WriteHeader(code)
}

func (h *handler) logRequests(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		rec := &statusRecorder{ResponseWriter: w, status: http.StatusOK}
		next.ServeHTTP(rec, r)
		h.logger.DebugContext(r.Context(), "http request", "method", r.Method, "path", r.URL.Path,
			"status", rec.status, "duration", time.Since(start))
	})
}

func (h *handler) healthz(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, h.logger, r, http.StatusOK, map[string]string{"status": "ok"})
}

func (h *handler) readyz(w http.ResponseWriter, r *http.Request) {
	if err := h.client.Ready(r.Context()); err != nil {
		writeError(w, h.logger, r, newError(http.StatusServiceUnavailable, CodeUnavailable, "", err.Error()))
		return
	}
	writeJSON(w, h.logger, r, http.StatusOK, map[string]string{"status": "ready"})
}

func (h *handler) openapi(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	if _, err := w.Write(openAPI); err != nil {
		h.logger.DebugContext(r.Context(), "writing openapi.json", "error", err)
	}
}

func (h *handler) enqueue(w http.ResponseWriter, r *http.Request) {
	body, err := readBody(w, r, h.opts.MaxBody)
	if err != nil {
		writeError(w, h.logger, r, fromError(err))
		return
	}
	var req TaskRequest
	if err := decodeJSON(body, &req); err != nil {
		writeError(w, h.logger, r, fromError(err))
		return
	}
	task, err := req.task(r)
	if err != nil {
		writeError(w, h.logger, r, fromError(err))
		return
	}
	res, err := h.tasks.Enqueue(r.Context(), task)
	if err != nil {
		writeError(w, h.logger, r, fromError(err))
		return
	}
	status := http.StatusCreated
	if res.Duplicate {
		status = http.StatusOK
	}
	w.Header().Set("Location", "/v1/tasks/"+res.ID)
	writeJSON(w, h.logger, r, status, res)
}

// BatchItem is one task's outcome in a batch answer: the enqueue result,
// or the error that kept it out. A failed item is {"id","error"}, the id
// only when the request gave one: it has no subject or sequence to show.
type BatchItem struct {
	producer.EnqueueResult
	Error *apiError `json:"error,omitempty"`
}

// MarshalJSON writes a failed item without an enqueue result's fields.
func (b BatchItem) MarshalJSON() ([]byte, error) {
	if b.Error == nil {
		return json.Marshal(b.EnqueueResult)
	}
	return json.Marshal(struct {
		ID    string    `json:"id,omitempty"`
		Error *apiError `json:"error"`
	}{b.ID, b.Error})
}

// BatchResponse answers POST /v1/tasks/batch, results in request order.
type BatchResponse struct {
	Results  []BatchItem `json:"results"`
	Enqueued int         `json:"enqueued"`
	Failed   int         `json:"failed"`
}

func (h *handler) batch(w http.ResponseWriter, r *http.Request) {
	body, err := readBody(w, r, h.opts.MaxBody)
	if err != nil {
		writeError(w, h.logger, r, fromError(err))
		return
	}
	var req BatchRequest
	if err := decodeJSON(body, &req); err != nil {
		writeError(w, h.logger, r, fromError(err))
		return
	}
	switch {
	case req.Tasks == nil:
		writeError(w, h.logger, r, newError(http.StatusBadRequest, CodeInvalidJSON, "tasks", `missing "tasks" array`))
		return
	case len(req.Tasks) > h.opts.MaxBatch:
		writeError(w, h.logger, r, newError(http.StatusRequestEntityTooLarge, CodeBatchTooLarge, "tasks",
			fmt.Sprintf("%d tasks, at most %d per batch", len(req.Tasks), h.opts.MaxBatch)))
		return
	}
	resp := BatchResponse{Results: make([]BatchItem, len(req.Tasks))}
	tasks := make([]producer.Task, 0, len(req.Tasks))
	index := make([]int, 0, len(req.Tasks)) // tasks[j] is request item index[j]
	for i, raw := range req.Tasks {
		var tr TaskRequest
		err := decodeJSON(raw, &tr)
		var task producer.Task
		if err == nil {
			task, err = tr.task(r)
		}
		if err != nil {
			e := fromError(err)
			e.Field = prefixField(fmt.Sprintf("tasks[%d]", i), e.Field)
			resp.Results[i] = BatchItem{EnqueueResult: producer.EnqueueResult{ID: tr.ID}, Error: e}
			continue
		}
		resp.Results[i].ID = tr.ID // kept for a task the library refuses
		tasks = append(tasks, task)
		index = append(index, i)
	}
	results, _ := h.tasks.EnqueueBatch(r.Context(), tasks) // per-task errors are in results
	for j, res := range results {
		i := index[j]
		if res.ID == "" {
			res.ID = resp.Results[i].ID
		}
		resp.Results[i].EnqueueResult = res.EnqueueResult
		if res.Err != nil {
			e := fromError(res.Err)
			e.Field = prefixField(fmt.Sprintf("tasks[%d]", i), e.Field)
			resp.Results[i].Error = e
		}
	}
	// When nothing got in and every task failed for one server-side reason
	// (queue_full, unavailable), answer with that status so callers back off.
	status := http.StatusOK
	var shared *apiError
	for _, it := range resp.Results {
		if it.Error == nil {
			resp.Enqueued++
			continue
		}
		resp.Failed++
		switch {
		case resp.Failed == 1 && it.Error.Status >= 500:
			shared = it.Error
		case shared != nil && it.Error.Code != shared.Code:
			shared = nil
		}
	}
	if resp.Enqueued == 0 && shared != nil {
		status = shared.Status
		if status == http.StatusServiceUnavailable {
			w.Header().Set("Retry-After", strconv.Itoa(retryAfter))
		}
	}
	writeJSON(w, h.logger, r, status, resp)
}

func prefixField(prefix, field string) string {
	if field == "" {
		return prefix
	}
	return prefix + "." + field
}

// result answers the result document of the task; with ?wait=<duration>
// it first waits up to that long (at most MaxWait) for a terminal state,
// completed, dead or cancelled, and answers the document as it is when
// the wait runs out.
func (h *handler) result(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if err := spool.ValidateID(id); err != nil {
		writeError(w, h.logger, r, fromError(spool.NewFieldError("id", err)))
		return
	}
	waitParam := r.URL.Query().Get("wait")
	if waitParam == "" {
		res, err := h.client.Result(r.Context(), id)
		if err != nil {
			writeError(w, h.logger, r, fromError(err))
			return
		}
		writeJSON(w, h.logger, r, http.StatusOK, res)
		return
	}
	wait, err := time.ParseDuration(waitParam)
	if err != nil || wait <= 0 || wait > h.opts.MaxWait {
		writeError(w, h.logger, r, newError(http.StatusBadRequest, CodeInvalidWait, "wait",
			fmt.Sprintf("wait %q must be a duration from 1ms to %s", waitParam, h.opts.MaxWait)))
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), wait)
	defer cancel()
	res, err := h.client.Wait(ctx, id)
	switch {
	case err == nil:
		writeJSON(w, h.logger, r, http.StatusOK, res)
	case ctx.Err() != nil && r.Context().Err() == nil:
		// The wait ran out: answer with what is there now.
		if res.ID != "" {
			writeJSON(w, h.logger, r, http.StatusOK, res)
			return
		}
		res, err := h.client.Result(r.Context(), id)
		if err != nil {
			writeError(w, h.logger, r, fromError(err))
			return
		}
		writeJSON(w, h.logger, r, http.StatusOK, res)
	default:
		writeError(w, h.logger, r, fromError(err))
	}
}

// output answers a completed task's output, byte for byte, as the body:
// application/json when it was stored as JSON, application/octet-stream
// when it is not UTF-8, else the type http.DetectContentType sniffs.
// Empty output answers 204; a task not completed yet answers 409.
func (h *handler) output(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if err := spool.ValidateID(id); err != nil {
		writeError(w, h.logger, r, newError(http.StatusBadRequest, CodeInvalidID, "id", err.Error()))
		return
	}
	res, err := h.client.Result(r.Context(), id)
	if err != nil {
		writeError(w, h.logger, r, fromError(err))
		return
	}
	if res.State != spool.StateCompleted {
		writeError(w, h.logger, r, newError(http.StatusConflict, CodeNotCompleted, "id",
			fmt.Sprintf("task %q is %s, not completed: it has no output yet", id, res.State)))
		return
	}
	out, err := res.Output()
	if err != nil {
		writeError(w, h.logger, r, fromError(err))
		return
	}
	if len(out) == 0 {
		w.WriteHeader(http.StatusNoContent)
		return
	}
	ct := "application/json"
	switch {
	case res.ResultEncoding == "":
	case !utf8.Valid(out):
		ct = "application/octet-stream"
	default:
		ct = http.DetectContentType(out)
	}
	w.Header().Set("Content-Type", ct)
	w.Header().Set("Content-Length", strconv.Itoa(len(out)))
	w.Header().Set("X-Content-Type-Options", "nosniff")
	if _, err := w.Write(out); err != nil {
		h.logger.DebugContext(r.Context(), "writing response", "error", err)
	}
}

func (h *handler) cancel(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	q := r.URL.Query()
	var opts []producer.CancelOption
	if by := q.Get("by"); by != "" {
		opts = append(opts, producer.CancelBy(by))
	} else {
		opts = append(opts, producer.CancelBy("http@"+r.RemoteAddr))
	}
	if why := q.Get("reason"); why != "" {
		opts = append(opts, producer.CancelReason(why))
	}
	res, err := h.client.Cancel(r.Context(), id, opts...)
	if errors.Is(err, producer.ErrTaskFinished) {
		e := newError(http.StatusConflict, CodeTaskFinished, "id", err.Error())
		e.State = string(res.State)
		writeError(w, h.logger, r, e)
		return
	}
	if errors.Is(err, producer.ErrTaskNotFound) {
		writeError(w, h.logger, r, newError(http.StatusNotFound, CodeNotFound, "id", err.Error()))
		return
	}
	if err != nil {
		writeError(w, h.logger, r, fromError(err))
		return
	}
	writeJSON(w, h.logger, r, http.StatusOK, cancelled{Result: res, Cancelled: true})
}

// cancelled is the answer to a cancel: the cancelled result document, and
// cancelled: true.
type cancelled struct {
	spool.Result
	Cancelled bool `json:"cancelled"`
}
