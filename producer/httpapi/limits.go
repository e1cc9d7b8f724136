package httpapi

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	spool "github.com/spoolq/spool/shared"
	"github.com/spoolq/spool/shared/limits"
	"github.com/spoolq/spool/streams/admin"
)

// CodeInvalidLimit answers a flow-control rule that does not hold.
const CodeInvalidLimit = "invalid_limit"

// maxRuleBody bounds a rule document.
const maxRuleBody = 64 << 10

// routeLimits adds the flow-control routes, behind the token like the task
// routes.
func (h *handler) routeLimits(mux *http.ServeMux) {
	mux.Handle("GET /v1/limits", h.auth(h.limitsList))
	mux.Handle("GET /v1/limits/{type}", h.auth(h.limitGet))
	mux.Handle("PUT /v1/limits/{type}", h.auth(h.limitPut))
	mux.Handle("DELETE /v1/limits/{type}", h.auth(h.limitDelete))
	mux.HandleFunc("/v1/limits", h.notAllowed("GET"))
	mux.HandleFunc("/v1/limits/{type}", h.notAllowed("GET, PUT, DELETE"))
}

// CodeNoLimit answers GET /v1/limits/{type} for a type no rule governs.
const CodeNoLimit = "no_limit"

func limitError(err error) *apiError {
	if errors.Is(err, spool.ErrInvalidDocument) {
		return fromError(err) // a stored rule, not the request, is at fault
	}
	if errors.Is(err, limits.ErrInvalidRule) {
		return newError(http.StatusBadRequest, CodeInvalidLimit, "", err.Error())
	}
	if errors.Is(err, limits.ErrNoRule) {
		return newError(http.StatusNotFound, CodeNoLimit, "", err.Error())
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

// ruleName reads the {type} of a limits path: a task type or a type
// pattern, written as such (email.*, email.%3E) or as its KV key
// (email.=any, email.=all).
func ruleName(r *http.Request) (string, error) {
	return limits.RuleName(r.PathValue("type"))
}

// limitExplained answers GET /v1/limits/{type}.
type limitExplained struct {
	// Type is the type asked about.
	Type string `json:"type"`
	// Rule is the rule that governs it, as stored: its Type is the type,
	// or the pattern that won.
	Rule limits.Rule `json:"rule"`
	// Key, with ?key=, is the per-key limits of that key.
	Key *keyExplained `json:"key,omitempty"`
}

type keyExplained struct {
	Key string `json:"key"`
	// Pattern is the key pattern of the rule's keys that matched; empty:
	// the rule's key_concurrency and key_rate apply.
	Pattern string `json:"pattern,omitempty"`
	limits.KeyLimit
}

// limitGet returns the rule that governs a type (its own, else the most
// precise pattern), or the rule stored under a pattern.
func (h *handler) limitGet(w http.ResponseWriter, r *http.Request) {
	name, err := ruleName(r)
	if err != nil {
		writeError(w, h.logger, r, limitError(err))
		return
	}
	var rule limits.Rule
	if limits.IsPattern(name) {
		rule, err = h.admin.Limit(r.Context(), name)
	} else {
		rule, err = h.admin.ResolveLimit(r.Context(), name)
	}
	if err != nil {
		writeError(w, h.logger, r, limitError(err))
		return
	}
	out := limitExplained{Type: name, Rule: rule}
	if r.URL.Query().Has("key") {
		key := r.URL.Query().Get("key")
		p, _ := limits.MatchKey(rule.Keys, key)
		out.Key = &keyExplained{Key: key, Pattern: p, KeyLimit: rule.KeyLimit(key)}
	}
	writeJSON(w, h.logger, r, http.StatusOK, out)
}

func (h *handler) limitPut(w http.ResponseWriter, r *http.Request) {
	name, err := ruleName(r)
	if err != nil {
		writeError(w, h.logger, r, limitError(err))
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxRuleBody+1))
	if err != nil {
		writeError(w, h.logger, r, newError(http.StatusBadRequest, CodeInvalidJSON, "", "reading the body: "+err.Error()))
		return
	}
	if len(body) > maxRuleBody {
		writeError(w, h.logger, r, newError(http.StatusRequestEntityTooLarge, CodeBodyTooLarge, "", fmt.Sprintf("a rule is at most %d bytes", maxRuleBody)))
		return
	}
	rule, err := limits.Decode(limits.RuleKey(name), body)
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
	typ, err := ruleName(r)
	if err != nil {
		writeError(w, h.logger, r, limitError(err))
		return
	}
	if err := h.admin.DeleteLimit(r.Context(), typ); err != nil {
		writeError(w, h.logger, r, limitError(err))
		return
	}
	h.logger.InfoContext(r.Context(), "flow-control rule removed", "type", typ)
	w.WriteHeader(http.StatusNoContent)
}

// limitsCollector exports the flow-control rules and their usage, read at
// most once per StatusCacheTTL.
type limitsCollector struct {
	usage *cached[[]limits.Usage]
}

func newLimitsCollector(adm *admin.Client, logger *slog.Logger) *limitsCollector {
	read := func(ctx context.Context) ([]limits.Usage, error) {
		u, err := adm.Limits(ctx)
		if err != nil {
			logger.DebugContext(ctx, "reading flow-control usage for metrics", "error", err)
		}
		return u, err
	}
	return &limitsCollector{usage: newCached(StatusCacheTTL, StatusTimeout, read)}
}

var (
	limitConcDesc     = prometheus.NewDesc("spool_limit_concurrency", "Concurrency limit of a task type across the fleet (rule \"concurrency\").", []string{"type"}, nil)
	limitRunningDesc  = prometheus.NewDesc("spool_limit_running", "Concurrency slots of a task type's limit held now.", []string{"type"}, nil)
	limitKeyConcDesc  = prometheus.NewDesc("spool_limit_key_concurrency", "Per-key concurrency limit of a task type (rule \"key_concurrency\").", []string{"type"}, nil)
	limitKeysRunDesc  = prometheus.NewDesc("spool_limit_keys_running", "Per-key concurrency slots of a task type held now.", []string{"type"}, nil)
	limitKeysActDesc  = prometheus.NewDesc("spool_limit_keys_active", "Keys of a task type holding at least one slot now.", []string{"type"}, nil)
	limitRateDesc     = prometheus.NewDesc("spool_limit_rate_per_second", "Rate limit of a task type in starts per second (rule \"rate\"; \"key_rate\" per key).", []string{"type", "scope"}, nil)
	limitWaitingDesc  = prometheus.NewDesc("spool_limit_rate_waiting", "Tasks a task type's rate limit turned away that are booked to come back (an estimate from its return queue).", []string{"type"}, nil)
	limitSlotWaitDesc = prometheus.NewDesc("spool_limit_waiting", "Tasks of a task type waiting in its concurrency limits' waiting rooms (the type's and every key's) for a slot.", []string{"type"}, nil)
	limitNextDesc     = prometheus.NewDesc("spool_limit_rate_next_start_seconds", "Time until a task type's rate limit allows its next start; 0 when one is free (above 0 the type starts at its limit).", []string{"type"}, nil)
	limitsUpDesc      = prometheus.NewDesc("spool_limits_up", "Whether the last read of the flow-control rules succeeded (1) or not (0).", nil, nil)
)

func (c *limitsCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{limitConcDesc, limitRunningDesc, limitKeyConcDesc, limitKeysRunDesc, limitKeysActDesc, limitRateDesc,
		limitWaitingDesc, limitSlotWaitDesc, limitNextDesc, limitsUpDesc} {
		ch <- d
	}
}

func (c *limitsCollector) Collect(ch chan<- prometheus.Metric) {
	// A scrape has no context; the read is bounded by StatusTimeout.
	usage, err := c.usage.get(context.Background())
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	if err != nil {
		gauge(limitsUpDesc, 0)
		return
	}
	gauge(limitsUpDesc, 1)
	for _, u := range usage {
		if limits.IsPattern(u.Rule.Type) {
			continue // each type it governs has a row of its own
		}
		t := u.Rule.Type
		if u.Rule.Concurrency > 0 {
			gauge(limitConcDesc, float64(u.Rule.Concurrency), t)
			gauge(limitRunningDesc, float64(u.Running), t)
		}
		if u.Rule.KeyConcurrency > 0 {
			gauge(limitKeyConcDesc, float64(u.Rule.KeyConcurrency), t)
			gauge(limitKeysRunDesc, float64(u.KeysRunning), t)
			gauge(limitKeysActDesc, float64(u.KeysActive), t)
		}
		if u.Rule.Concurrency > 0 || u.Rule.KeyConcurrency > 0 || len(u.Rule.Keys) > 0 || u.Waiting > 0 {
			gauge(limitSlotWaitDesc, float64(u.Waiting), t)
		}
		if r := u.Rule.Rate; r != nil {
			gauge(limitRateDesc, float64(time.Second)/float64(r.Interval()), t, "type")
		}
		if ru := u.Rate; ru != nil {
			gauge(limitWaitingDesc, float64(ru.Waiting), t)
			gauge(limitNextDesc, ru.NextStart.Seconds(), t)
		}
		if r := u.Rule.KeyRate; r != nil {
			gauge(limitRateDesc, float64(time.Second)/float64(r.Interval()), t, "key")
		}
	}
}
