package fleet

import "time"

// ServiceName is the NATS micro service name every consumer process
// registers under: `nats micro ls`, `nats micro info spool-consumer` and
// `nats micro stats spool-consumer` list the fleet.
const ServiceName = "spool-consumer"

// MetadataHandlers is the service metadata key listing the task types a
// consumer process serves, comma-separated: exact types, and the type
// patterns of its remote routes (* one token, a final > the rest).
const MetadataHandlers = "handlers"

// MetadataConformance is the service metadata key in which a worker
// declares the conformance level of the wire contract it meets:
// ConformanceCore or ConformanceFull. The Go worker meets the full level.
const MetadataConformance = "conformance"

// The conformance levels a worker declares under MetadataConformance.
const (
	// ConformanceCore: the worker pulls only what it can start, stores
	// the result before the ack, retries, dead-letters, honours cancels,
	// heartbeats, unique keys and stored outcomes, and joins a fleet for
	// the types it serves.
	ConformanceCore = "core"
	// ConformanceFull: the core level plus priority weights, type
	// pauses, flow control, ordered keys, workflows, snoozes and the
	// stats service.
	ConformanceFull = "full"
)

// WorkerStats are a worker's live figures: the data of its $SRV.STATS
// endpoint and the answer of its stats endpoint. Counters are cumulative
// since the worker started.
type WorkerStats struct {
	// Worker is the process's worker name.
	Worker string `json:"worker"`
	// State is new, idle, busy, stopping or stopped.
	State string `json:"state"`
	// Slots is the current pool size, Busy the slots running a handler,
	// Idle the rest; MinSlots and MaxSlots bound Slots.
	Slots    int `json:"slots"`
	Busy     int `json:"busy"`
	Idle     int `json:"idle"`
	MinSlots int `json:"min_slots"`
	MaxSlots int `json:"max_slots"`
	// ScaleUps and ScaleDowns count autoscaling steps.
	ScaleUps   uint64 `json:"scale_ups"`
	ScaleDowns uint64 `json:"scale_downs"`
	// Total sums every priority's counters (distributions without bucket
	// counts).
	Total CounterStats `json:"total"`
	// Priorities has one entry per priority, most urgent first, with
	// bucket counts in the distributions so readers can merge them.
	Priorities []PriorityStats `json:"priorities"`
	// Types has the counters of each task type (without distributions).
	Types map[string]CounterStats `json:"types,omitempty"`
	// Router is the DLQ router's counters, when the process runs one.
	Router *RouterStats `json:"dlq_router,omitempty"`
	// Remote has one entry per remote-handler route, in matching order,
	// when the process serves types with remote handlers.
	Remote []RemoteRouteStats `json:"remote,omitempty"`
}

// RemoteRouteStats are one remote-handler route's settings and counters.
type RemoteRouteStats struct {
	// Pattern is the task-type pattern, Subject the request subject
	// ("{type}" standing for the task type).
	Pattern string `json:"type"`
	Subject string `json:"subject"`
	// Concurrency caps the requests in flight (0: no cap); TimeoutNS caps
	// each wait for a reply, in nanoseconds (0: the task's own deadline).
	Concurrency int   `json:"concurrency"`
	TimeoutNS   int64 `json:"timeout_ns"`
	// InFlight is the requests waiting for a reply now.
	InFlight int64 `json:"in_flight"`
	// Calls counts requests sent; Completed, Failed (a Spool-Error reply
	// or a request error), Timeouts (no reply, or no free place, before
	// the deadline) and NoResponders (nobody listening) their outcomes.
	Calls        uint64 `json:"calls"`
	Completed    uint64 `json:"completed"`
	Failed       uint64 `json:"failed"`
	Timeouts     uint64 `json:"timeouts"`
	NoResponders uint64 `json:"no_responders"`
}

// CounterStats count attempts and their outcomes.
type CounterStats struct {
	// Processed counts finished attempts, whatever their outcome.
	Processed uint64 `json:"processed"`
	// Completed counts attempts whose handler succeeded.
	Completed uint64 `json:"completed"`
	// Failed counts failed attempts (error, permanent, timeout, panic, no
	// handler, bad input).
	Failed uint64 `json:"failed"`
	// Retried counts attempts handed back for a later retry (failed, or
	// completed with a result that could not be stored in time).
	Retried uint64 `json:"retried"`
	// WriteRetries counts settling writes (result, dead letter) sent
	// again after a try the cluster did not answer (a leader election).
	// Such a write stored on a later try is no failure. Absent (0) from
	// workers that predate it.
	WriteRetries uint64 `json:"write_retries,omitempty"`
	// Dead counts tasks sent to the dead-letter stream.
	Dead uint64 `json:"dead"`
	// Returned counts tasks handed back unfinished at shutdown.
	Returned uint64 `json:"returned"`
	// Pickup is the time from enqueue to the start of the first attempt;
	// Run is the handler's run time. Absent when not reported or empty.
	Pickup *DistStats `json:"pickup,omitempty"`
	Run    *DistStats `json:"run,omitempty"`
}

// PriorityStats are one priority's figures.
type PriorityStats struct {
	// Priority is the priority's name (critical … idle).
	Priority string `json:"priority"`
	CounterStats
	// Busy is the number of the worker's slots running tasks of the
	// priority.
	Busy int `json:"busy"`
	// Backlog is the tasks waiting (the consumer's NumPending) as last
	// seen by a pull or a refresh.
	Backlog uint64 `json:"backlog"`
	// OldestWait is the age of the oldest waiting task at the last
	// refresh; zero when none waits or it is unknown.
	OldestWait time.Duration `json:"oldest_wait_ns"`
	// Weight is the configured weight times the boost the oldest wait
	// earns.
	Weight float64 `json:"weight"`
}

// DistStats summarise a Histogram: count, sum, mean and quantiles, and
// (where the writer includes them) the per-bucket counts, bounds Bounds()
// then +Inf, so several workers' distributions can be merged.
type DistStats struct {
	Count  uint64        `json:"count"`
	Sum    time.Duration `json:"sum_ns"`
	Mean   time.Duration `json:"mean_ns"`
	P50    time.Duration `json:"p50_ns"`
	P95    time.Duration `json:"p95_ns"`
	P99    time.Duration `json:"p99_ns"`
	Counts []uint64      `json:"counts,omitempty"`
}

// Summarize returns h's DistStats, with the bucket counts when buckets is
// set; nil when h is empty.
func Summarize(h Histogram, buckets bool) *DistStats {
	if h.Count == 0 {
		return nil
	}
	s := &DistStats{Count: h.Count, Sum: h.Sum, Mean: h.Mean(), P50: h.Quantile(0.5), P95: h.Quantile(0.95), P99: h.Quantile(0.99)}
	if buckets {
		s.Counts = h.Counts
	}
	return s
}

// Histogram returns the histogram the summary was made from, when it
// carries bucket counts (ok is false otherwise).
func (d *DistStats) Histogram() (h Histogram, ok bool) {
	if d == nil || len(d.Counts) != NumBounds+1 {
		return Histogram{}, false
	}
	return Histogram{Count: d.Count, Sum: d.Sum, Counts: append([]uint64(nil), d.Counts...)}, true
}

// RouterStats count what a DLQ router did since it started.
type RouterStats struct {
	// Routed counts tasks this router moved to the dead-letter stream.
	Routed uint64 `json:"routed"`
	// Gone counts advisories whose task was already gone (handled by the
	// worker or another router).
	Gone uint64 `json:"gone"`
	// Bad counts advisories dropped because they could not be parsed.
	Bad uint64 `json:"bad"`
	// Failed counts attempts that hit a transient error; the advisory was
	// retried.
	Failed uint64 `json:"failed"`
}
