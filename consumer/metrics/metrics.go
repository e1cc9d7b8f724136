// Package metrics exposes a Spool worker to Prometheus. Its Collector reads
// Worker.Stats() (and, when given, the DLQ router's Stats() and the
// dead-letter count) when scraped: nothing is added to the task path.
//
// Every metric is listed in Names; docs/guide/metrics.md documents them.
// Counters and histograms are cumulative since the worker started; the
// histograms use the worker's own buckets (fleet.Bounds, 50µs doubling up
// to about 3.5 minutes), exposed as constant histograms.
package metrics

import (
	"context"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/spoolq/spool/consumer"
	"github.com/spoolq/spool/consumer/dlqrouter"
	"github.com/spoolq/spool/shared/fleet"
	"github.com/spoolq/spool/shared/logging"
)

// Defaults of the dead-letter count read.
const (
	// DefaultDLQCacheTTL is how long one dead-letter count is reused.
	DefaultDLQCacheTTL = time.Second
	// DefaultDLQTimeout bounds one dead-letter count read.
	DefaultDLQTimeout = 2 * time.Second
)

// Option configures a Collector.
type Option func(*Collector)

// WithRouter adds the DLQ router's counters.
func WithRouter(r *dlqrouter.Router) Option { return func(c *Collector) { c.router = r } }

// WithDeadLetters adds the spool_dlq_messages gauge, read with count (for
// instance dlq.New(js, names).Size) at most once per DefaultDLQCacheTTL and
// within DefaultDLQTimeout. A failed read leaves the gauge out of that scrape.
func WithDeadLetters(count func(context.Context) (uint64, error)) Option {
	return func(c *Collector) { c.dlqCount = count }
}

// WithLogger logs failed dead-letter counts (at debug). Default (and
// nil): warnings and errors on standard error (logging.OrDefault).
func WithLogger(l *slog.Logger) Option {
	return func(c *Collector) { c.logger = logging.OrDefault(l) }
}

// Collector is a prometheus.Collector over one worker.
type Collector struct {
	ctx      context.Context
	w        *consumer.Worker
	router   *dlqrouter.Router
	dlqCount func(context.Context) (uint64, error)
	logger   *slog.Logger
	now      func() time.Time

	mu      sync.Mutex
	dlqAt   time.Time
	dlqVal  uint64
	dlqOK   bool
	dlqBusy chan struct{} // closed when the read in flight ends
}

var _ prometheus.Collector = (*Collector)(nil)

// New returns a Collector reading w. ctx bounds the reads made on scrape
// (the dead-letter count): once it ends, they fail.
func New(ctx context.Context, w *consumer.Worker, opts ...Option) *Collector {
	c := &Collector{ctx: ctx, w: w, logger: logging.OrDefault(nil), now: time.Now}
	for _, o := range opts {
		o(c)
	}
	return c
}

const ns = "spool"

func desc(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc(ns+"_"+name, help, labels, nil)
}

// The metrics. Names lists them.
var (
	counterDescs = []struct {
		name, help string
		get        func(*consumer.Counters) uint64
	}{
		{"processed", "Finished attempts, whatever their outcome.", func(c *consumer.Counters) uint64 { return c.Processed }},
		{"completed", "Attempts whose handler succeeded.", func(c *consumer.Counters) uint64 { return c.Completed }},
		{"failed", "Attempts that failed (error, permanent, timeout, panic, no handler, bad input).", func(c *consumer.Counters) uint64 { return c.Failed }},
		{"retried", "Attempts handed back for a later retry (failed, or completed with a result that could not be stored).", func(c *consumer.Counters) uint64 { return c.Retried }},
		{"write_retries", "Settling writes (result, dead letter) sent again after a try the cluster did not answer.", func(c *consumer.Counters) uint64 { return c.WriteRetries }},
		{"dead", "Tasks sent to the dead-letter stream.", func(c *consumer.Counters) uint64 { return c.Dead }},
		{"returned", "Tasks handed back unfinished at shutdown.", func(c *consumer.Counters) uint64 { return c.Returned }},
	}
	byPriority = func() (d []*prometheus.Desc) {
		for _, c := range counterDescs {
			d = append(d, desc("tasks_"+c.name+"_total", c.help+" By priority.", "priority"))
		}
		return d
	}()
	byType = func() (d []*prometheus.Desc) {
		for _, c := range counterDescs {
			d = append(d, desc("type_tasks_"+c.name+"_total", c.help+" By task type.", "type"))
		}
		return d
	}()

	pickupDesc     = desc("pickup_seconds", "Time from enqueue to the start of the first attempt, by priority.", "priority")
	runDesc        = desc("run_seconds", "Handler run time, by priority.", "priority")
	typePickupDesc = desc("type_pickup_seconds", "Time from enqueue to the start of the first attempt, by task type.", "type")
	typeRunDesc    = desc("type_run_seconds", "Handler run time, by task type.", "type")

	backlogDesc  = desc("backlog", "Tasks waiting (never delivered) by priority, as last seen by this worker.", "priority")
	oldestDesc   = desc("oldest_wait_seconds", "Age of the oldest waiting task by priority at the worker's last refresh; 0 when none.", "priority")
	prioBusyDesc = desc("priority_busy_slots", "Slots running tasks of the priority.", "priority")
	weightDesc   = desc("priority_weight", "Scheduling weight of the priority, boost included.", "priority")
	slotsDesc    = desc("slots", "Worker slots by state: busy (running a handler) or idle.", "state")
	slotsMaxDesc = desc("slots_max", "Most slots the pool may grow to.")
	slotsMinDesc = desc("slots_min", "Fewest slots the pool keeps.")
	scaleDesc    = desc("scale_steps_total", "Autoscaling steps, by direction (up, down).", "direction")
	stateDesc    = desc("worker_state", "1 for the worker's lifecycle state (new, idle, busy, stopping, stopped).", "state")
	infoDesc     = desc("worker_info", "Always 1; the worker name in a label.", "worker")
	dlqDesc      = desc("dlq_messages", "Dead letters in the dead-letter stream.")
	// Flow control, by task type (a type with a rule): per key would be
	// unbounded, see spool-admin limits for the busiest keys.
	flowAdmittedDesc = desc("flow_admitted_total", "Tasks a flow-control rule let run (leases taken), by task type.", "type")
	flowBackDesc     = desc("flow_handed_back_total", "Tasks turned away because a flow-control limit was full (a rate's handed back for later, a concurrency limit's parked in its waiting room), by task type and limit (concurrency, key_concurrency, rate, key_rate).", "type", "limit")
	flowParkedDesc   = desc("flow_parked_total", "Tasks parked in a concurrency limit's waiting room, by task type and limit (concurrency, key_concurrency).", "type", "limit")
	flowReleasedDesc = desc("flow_released_total", "Tasks released from the type's waiting rooms with a slot handed to them, by task type.", "type")
	flowHeldDesc     = desc("flow_slots_held", "Tasks of the type running under a flow-control rule in this worker.", "type")
	flowWaitingDesc  = desc("flow_waiting", "Tasks of the type waiting in this worker for a rate limit's start.", "type")
	routerDescs      = []*prometheus.Desc{
		desc("dlq_router_routed_total", "Tasks the DLQ router moved to the dead-letter stream."),
		desc("dlq_router_gone_total", "MAX_DELIVERIES advisories whose task was already gone."),
		desc("dlq_router_bad_total", "Advisories dropped because they could not be parsed."),
		desc("dlq_router_failed_total", "Advisory handlings that hit a transient error and were retried."),
	}
)

// flowLimits are the values of the limit label (flow.DeniedError.Limit).
var flowLimits = []string{"concurrency", "key_concurrency", "rate", "key_rate"}

var states = []consumer.WorkerState{consumer.WorkerNew, consumer.WorkerIdle, consumer.WorkerBusy, consumer.WorkerStopping, consumer.WorkerStopped}

// Names lists the fully qualified names of every metric the Collector
// may export (histograms add _bucket, _sum and _count).
func Names() []string {
	var all []*prometheus.Desc
	all = append(all, byPriority...)
	all = append(all, byType...)
	all = append(all, pickupDesc, runDesc, typePickupDesc, typeRunDesc, backlogDesc, oldestDesc, prioBusyDesc,
		weightDesc, slotsDesc, slotsMaxDesc, slotsMinDesc, scaleDesc, stateDesc, infoDesc, dlqDesc,
		flowAdmittedDesc, flowBackDesc, flowHeldDesc, flowWaitingDesc, flowParkedDesc, flowReleasedDesc)
	all = append(all, routerDescs...)
	names := make([]string, 0, len(all))
	for _, d := range all {
		names = append(names, fqName(d))
	}
	sort.Strings(names)
	return names
}

// fqName reads the name out of a Desc (its String form starts with
// Desc{fqName: "<name>").
func fqName(d *prometheus.Desc) string {
	_, rest, _ := strings.Cut(d.String(), `fqName: "`)
	name, _, _ := strings.Cut(rest, `"`)
	return name
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range byPriority {
		ch <- d
	}
	for _, d := range byType {
		ch <- d
	}
	for _, d := range []*prometheus.Desc{pickupDesc, runDesc, typePickupDesc, typeRunDesc, backlogDesc, oldestDesc,
		prioBusyDesc, weightDesc, slotsDesc, slotsMaxDesc, slotsMinDesc, scaleDesc, stateDesc, infoDesc,
		flowAdmittedDesc, flowBackDesc, flowHeldDesc, flowWaitingDesc, flowParkedDesc, flowReleasedDesc} {
		ch <- d
	}
	if c.dlqCount != nil {
		ch <- dlqDesc
	}
	if c.router != nil {
		for _, d := range routerDescs {
			ch <- d
		}
	}
}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	s := c.w.Stats()
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	counter := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	counters := func(descs []*prometheus.Desc, cs *consumer.Counters, label string) {
		for i, cd := range counterDescs {
			counter(descs[i], cd.get(cs), label)
		}
	}
	for i := range s.Priorities {
		p := &s.Priorities[i]
		name := p.Priority.String()
		counters(byPriority, &p.Counters, name)
		ch <- histogram(pickupDesc, p.Pickup, name)
		ch <- histogram(runDesc, p.Run, name)
		gauge(backlogDesc, float64(p.Backlog), name)
		gauge(oldestDesc, p.OldestWait.Seconds(), name)
		gauge(prioBusyDesc, float64(p.Busy), name)
		gauge(weightDesc, p.Weight, name)
	}
	for typ, tc := range s.Types {
		counters(byType, &tc, typ)
		ch <- histogram(typePickupDesc, tc.Pickup, typ)
		ch <- histogram(typeRunDesc, tc.Run, typ)
	}
	for typ, fs := range s.Flow {
		counter(flowAdmittedDesc, fs.Acquired, typ)
		for _, limit := range flowLimits {
			counter(flowBackDesc, fs.Denied[limit], typ, limit)
		}
		for _, limit := range flowLimits[:2] {
			counter(flowParkedDesc, fs.Parked[limit], typ, limit)
		}
		counter(flowReleasedDesc, fs.Released, typ)
		gauge(flowHeldDesc, float64(fs.Held), typ)
		gauge(flowWaitingDesc, float64(fs.Waiting), typ)
	}
	gauge(slotsDesc, float64(s.Busy), "busy")
	gauge(slotsDesc, float64(s.Idle), "idle")
	gauge(slotsMaxDesc, float64(s.MaxSlots))
	gauge(slotsMinDesc, float64(s.MinSlots))
	counter(scaleDesc, s.ScaleUps, "up")
	counter(scaleDesc, s.ScaleDowns, "down")
	for _, st := range states {
		v := 0.0
		if st == s.State {
			v = 1
		}
		gauge(stateDesc, v, string(st))
	}
	gauge(infoDesc, 1, s.Worker)
	if c.router != nil {
		rs := c.router.Stats()
		for i, v := range []uint64{rs.Routed, rs.Gone, rs.Bad, rs.Failed} {
			counter(routerDescs[i], v)
		}
	}
	if n, ok := c.deadLetters(); ok {
		gauge(dlqDesc, float64(n))
	}
}

// histogram turns a worker Distribution (per-bucket counts) into a
// constant Prometheus histogram (cumulative counts, seconds).
func histogram(d *prometheus.Desc, dist fleet.Histogram, label string) prometheus.Metric {
	bounds := fleet.Bounds()
	buckets := make(map[float64]uint64, len(bounds))
	var cum uint64
	for i, b := range bounds {
		if i < len(dist.Counts) {
			cum += dist.Counts[i]
		}
		buckets[b.Seconds()] = cum
	}
	return prometheus.MustNewConstHistogram(d, dist.Count, dist.Sum.Seconds(), buckets, label)
}

// deadLetters returns the cached dead-letter count, reading it again when
// older than DefaultDLQCacheTTL. Concurrent scrapes share one read.
func (c *Collector) deadLetters() (uint64, bool) {
	if c.dlqCount == nil {
		return 0, false
	}
	c.mu.Lock()
	if c.dlqOK && c.now().Sub(c.dlqAt) < DefaultDLQCacheTTL {
		defer c.mu.Unlock()
		return c.dlqVal, true
	}
	if busy := c.dlqBusy; busy != nil {
		c.mu.Unlock()
		<-busy
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.dlqVal, c.dlqOK
	}
	busy := make(chan struct{})
	c.dlqBusy = busy
	c.mu.Unlock()

	ctx, cancel := context.WithTimeout(c.ctx, DefaultDLQTimeout)
	n, err := c.dlqCount(ctx)
	cancel()

	c.mu.Lock()
	defer c.mu.Unlock()
	c.dlqBusy = nil
	close(busy)
	c.dlqAt = c.now()
	c.dlqOK = err == nil
	if err != nil {
		c.logger.Debug("reading the dead-letter count for metrics", "error", err)
		return 0, false
	}
	c.dlqVal = n
	return n, true
}
