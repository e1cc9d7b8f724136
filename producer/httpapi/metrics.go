package httpapi

import (
	"context"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/spoolq/spool/streams/admin"
)

// brokerMetrics are the broker's request metrics.
type brokerMetrics struct {
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
}

// routeMetrics registers the broker's metrics on the registry of Options
// (a new one when nil) and serves it on GET /metrics, behind the token like
// the API.
func (h *handler) routeMetrics(mux *http.ServeMux) {
	reg := h.opts.Registry
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	h.metrics = &brokerMetrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "spool_broker_requests_total",
			Help: "HTTP requests answered, by route (the ServeMux pattern, \"POST /v1/tasks\" is an enqueue) and status code.",
		}, []string{"route", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "spool_broker_request_duration_seconds",
			Help:    "Time to answer an HTTP request, by route; route \"POST /v1/tasks\" is the enqueue latency.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 2, 18), // 100µs to ~13s
		}, []string{"route"}),
	}
	reg.MustRegister(h.metrics.requests, h.metrics.duration, newQueueCollector(h.admin, h.logger), newLimitsCollector(h.admin, h.logger))
	mux.Handle("GET /metrics", h.auth(promhttp.HandlerFor(reg, promhttp.HandlerOpts{
		ErrorLog:      slog.NewLogLogger(h.logger.Handler(), slog.LevelWarn),
		ErrorHandling: promhttp.ContinueOnError,
	}).ServeHTTP))
	mux.HandleFunc("/metrics", h.notAllowed("GET"))
}

// instrument counts and times every request by its route.
func (h *handler) instrument(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		rec := &statusRecorder{ResponseWriter: w, status: http.StatusOK}
		next.ServeHTTP(rec, r)
		route := r.Pattern // set by the ServeMux on this request
		if route == "" || route == "/" {
			route = "unmatched"
		}
		h.metrics.requests.WithLabelValues(route, strconv.Itoa(rec.status)).Inc()
		h.metrics.duration.WithLabelValues(route).Observe(time.Since(start).Seconds())
	})
}

// queueCollector exports the admin client's Status, read at most once per
// StatusCacheTTL.
type queueCollector struct {
	status *cached[admin.Status]
}

func newQueueCollector(adm *admin.Client, logger *slog.Logger) *queueCollector {
	read := func(ctx context.Context) (admin.Status, error) {
		st, err := adm.Status(ctx)
		if err != nil {
			logger.DebugContext(ctx, "reading the queue status for metrics", "error", err)
		}
		return st, err
	}
	return &queueCollector{status: newCached(StatusCacheTTL, StatusTimeout, read)}
}

var (
	queuePendingDesc  = prometheus.NewDesc("spool_queue_pending", "Tasks waiting (never delivered), by priority.", []string{"priority"}, nil)
	queueInFlightDesc = prometheus.NewDesc("spool_queue_in_flight", "Tasks delivered and not acked (running or in retry backoff), by priority.", []string{"priority"}, nil)
	queueRedelivDesc  = prometheus.NewDesc("spool_queue_redelivered", "In-flight tasks delivered more than once, by priority.", []string{"priority"}, nil)
	queueOldestDesc   = prometheus.NewDesc("spool_queue_oldest_wait_seconds", "Age of the oldest waiting task, by priority; 0 when none.", []string{"priority"}, nil)
	queueSchedDesc    = prometheus.NewDesc("spool_queue_scheduled", "Delayed tasks whose time has not come.", nil, nil)
	queueDLQDesc      = prometheus.NewDesc("spool_dlq_messages", "Dead letters in the dead-letter stream.", nil, nil)
	queueResultsDesc  = prometheus.NewDesc("spool_results", "Result documents kept.", nil, nil)
	queueBytesDesc    = prometheus.NewDesc("spool_task_store_bytes", "Size of the task stream on the server.", nil, nil)
	queueUpDesc       = prometheus.NewDesc("spool_queue_status_up", "Whether the last read of the queue's status succeeded (1) or not (0).", nil, nil)
	// Where workers pull by type: the queued task types no worker serves
	// (at most 100, the most queued).
	queueUnservedDesc       = prometheus.NewDesc("spool_queue_unserved", "Tasks queued of a type no worker serves (where workers pull by type), by task type and priority.", []string{"type", "priority"}, nil)
	queueUnservedOldestDesc = prometheus.NewDesc("spool_queue_unserved_oldest_wait_seconds", "Age of the oldest queued task of a type no worker serves (where workers pull by type), by task type and priority.", []string{"type", "priority"}, nil)
)

func (c *queueCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{queuePendingDesc, queueInFlightDesc, queueRedelivDesc, queueOldestDesc,
		queueSchedDesc, queueDLQDesc, queueResultsDesc, queueBytesDesc, queueUpDesc, queueUnservedDesc, queueUnservedOldestDesc} {
		ch <- d
	}
}

func (c *queueCollector) Collect(ch chan<- prometheus.Metric) {
	// A scrape has no context; the read is bounded by StatusTimeout.
	st, err := c.status.get(context.Background())
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	if err != nil {
		gauge(queueUpDesc, 0)
		return
	}
	gauge(queueUpDesc, 1)
	for _, p := range st.Priorities {
		name := p.Priority.String()
		gauge(queuePendingDesc, float64(p.Pending), name)
		gauge(queueInFlightDesc, float64(p.InFlight), name)
		gauge(queueRedelivDesc, float64(p.Redelivered), name)
		gauge(queueOldestDesc, p.OldestWait.Seconds(), name)
	}
	for _, u := range st.Unserved {
		gauge(queueUnservedDesc, float64(u.Queued), u.Type, u.Priority.String())
		gauge(queueUnservedOldestDesc, u.OldestWait.Seconds(), u.Type, u.Priority.String())
	}
	gauge(queueSchedDesc, float64(st.Scheduled))
	gauge(queueDLQDesc, float64(st.DeadLetters))
	gauge(queueResultsDesc, float64(st.Results))
	gauge(queueBytesDesc, float64(st.StoreBytes))
}
