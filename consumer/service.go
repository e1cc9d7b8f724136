package consumer

import (
	"encoding/json"
	"fmt"
	"maps"
	"regexp"
	"runtime/debug"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
)

// ServiceName is the NATS service (micro) name every worker registers
// under: `nats micro ls`, `nats micro info spool-consumer` and `nats micro
// stats spool-consumer` list the fleet.
const ServiceName = "spool-consumer"

// ServiceOption configures AddService.
type ServiceOption func(*serviceConfig) error

type serviceConfig struct {
	version  string
	metadata map[string]string
	router   *Router
}

// WithServiceVersion sets the service's SemVer version. Default: the main
// module's version from the build information, else 0.0.0.
func WithServiceVersion(v string) ServiceOption {
	return func(c *serviceConfig) error {
		if !semver.MatchString(v) {
			return fmt.Errorf("%w: service version %q is not SemVer", ErrInvalidOption, v)
		}
		c.version = v
		return nil
	}
}

// WithServiceMetadata adds metadata (such as metrics_addr) to the service's
// info. The worker name and the prefix are always there.
func WithServiceMetadata(md map[string]string) ServiceOption {
	return func(c *serviceConfig) error {
		maps.Copy(c.metadata, md)
		return nil
	}
}

// WithServiceRouter adds the DLQ router's counters to the stats.
func WithServiceRouter(r *Router) ServiceOption {
	return func(c *serviceConfig) error { c.router = r; return nil }
}

// semver is the pattern nats.go's micro package accepts.
var semver = regexp.MustCompile(`^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(?:-((?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*)(?:\.(?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*))*))?(?:\+([0-9a-zA-Z-]+(?:\.[0-9a-zA-Z-]+)*))?$`)

func buildVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		if v := strings.TrimPrefix(bi.Main.Version, "v"); semver.MatchString(v) {
			return v
		}
	}
	return "0.0.0"
}

// subjectToken turns s into one subject token: characters other than
// [A-Za-z0-9_-] become '_'.
func subjectToken(s string) string {
	return strings.Map(func(r rune) rune {
		if r == '_' || r == '-' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' {
			return r
		}
		return '_'
	}, s)
}

// ServiceSubject is the subject of a worker's stats endpoint:
// <prefix>.svc.consumer.<worker>.<service-id>.stats, the worker name reduced
// to one subject token (two processes may share a name; the service id tells
// them apart). A request there returns the worker's ServiceStats.
func ServiceSubject(prefix, worker, id string) string {
	return prefix + ".svc.consumer." + subjectToken(worker) + "." + subjectToken(id) + ".stats"
}

// AddService registers w as an instance of the ServiceName micro service on
// nc. Its one endpoint, "stats" (ServiceSubject), answers with the live
// ServiceStats, which also fill the endpoint's data in $SRV.STATS replies.
// Stop the returned service before closing nc; it also stops when nc
// closes.
func AddService(nc *nats.Conn, w *Worker, opts ...ServiceOption) (micro.Service, error) {
	cfg := serviceConfig{version: buildVersion(), metadata: map[string]string{}}
	for _, o := range opts {
		if err := o(&cfg); err != nil {
			return nil, err
		}
	}
	cfg.metadata["worker"] = w.o.WorkerName
	cfg.metadata["prefix"] = w.o.Names.Prefix()
	stats := func() ServiceStats { return NewServiceStats(w.Stats(), cfg.router) }
	svc, err := micro.AddService(nc, micro.Config{
		Name:         ServiceName,
		Version:      cfg.version,
		Description:  "Spool worker: pulls tasks by priority and runs their handlers",
		Metadata:     cfg.metadata,
		StatsHandler: func(*micro.Endpoint) any { return stats() },
	})
	if err != nil {
		return nil, fmt.Errorf("registering the %s service: %w", ServiceName, err)
	}
	err = svc.AddEndpoint("stats", micro.HandlerFunc(func(req micro.Request) {
		_ = req.RespondJSON(stats()) // the requester may be gone; nothing to do then
	}), micro.WithEndpointSubject(ServiceSubject(w.o.Names.Prefix(), w.o.WorkerName, svc.Info().ID)),
		micro.WithEndpointQueueGroupDisabled(),
		micro.WithEndpointMetadata(map[string]string{"format": "application/json"}))
	if err != nil {
		return nil, errorsJoinStop(fmt.Errorf("adding the stats endpoint: %w", err), svc)
	}
	return svc, nil
}

func errorsJoinStop(err error, svc micro.Service) error {
	if serr := svc.Stop(); serr != nil {
		return fmt.Errorf("%w (stopping the service: %v)", err, serr)
	}
	return err
}

// ServiceStats are a worker's live figures as the service reports them: the
// data of its $SRV.STATS endpoint and the answer of its stats endpoint.
// Durations are in nanoseconds.
type ServiceStats struct {
	Worker     string                 `json:"worker"`
	State      WorkerState            `json:"state"`
	Slots      int                    `json:"slots"`
	Busy       int                    `json:"busy"`
	Idle       int                    `json:"idle"`
	MinSlots   int                    `json:"min_slots"`
	MaxSlots   int                    `json:"max_slots"`
	ScaleUps   uint64                 `json:"scale_ups"`
	ScaleDowns uint64                 `json:"scale_downs"`
	Total      CounterStats           `json:"total"`
	Priorities []PriorityServiceStats `json:"priorities"`
	// Types has the counters of each task type (without distributions).
	Types  map[string]CounterStats `json:"types,omitempty"`
	Router *RouterStats            `json:"dlq_router,omitempty"`
}

// CounterStats are Counters in JSON form.
type CounterStats struct {
	Processed uint64     `json:"processed"`
	Completed uint64     `json:"completed"`
	Failed    uint64     `json:"failed"`
	Retried   uint64     `json:"retried"`
	Dead      uint64     `json:"dead"`
	Returned  uint64     `json:"returned"`
	Pickup    *DistStats `json:"pickup,omitempty"`
	Run       *DistStats `json:"run,omitempty"`
}

// PriorityServiceStats are one priority's figures.
type PriorityServiceStats struct {
	Priority string `json:"priority"`
	CounterStats
	Busy       int           `json:"busy"`
	Backlog    uint64        `json:"backlog"`
	OldestWait time.Duration `json:"oldest_wait_ns"`
	Weight     float64       `json:"weight"`
}

// DistStats summarise a Distribution: count, sum, mean and quantiles, and
// the per-bucket counts (bounds: DistributionBounds, then +Inf) so that
// several workers' distributions can be merged.
type DistStats struct {
	Count  uint64        `json:"count"`
	Sum    time.Duration `json:"sum_ns"`
	Mean   time.Duration `json:"mean_ns"`
	P50    time.Duration `json:"p50_ns"`
	P95    time.Duration `json:"p95_ns"`
	P99    time.Duration `json:"p99_ns"`
	Counts []uint64      `json:"counts,omitempty"`
}

func distStats(d Distribution, buckets bool) *DistStats {
	if d.Count == 0 {
		return nil
	}
	s := &DistStats{Count: d.Count, Sum: d.Sum, Mean: d.Mean(), P50: d.Quantile(0.5), P95: d.Quantile(0.95), P99: d.Quantile(0.99)}
	if buckets {
		s.Counts = d.Counts
	}
	return s
}

func counterStats(c Counters, dists, buckets bool) CounterStats {
	s := CounterStats{Processed: c.Processed, Completed: c.Completed, Failed: c.Failed, Retried: c.Retried, Dead: c.Dead, Returned: c.Returned}
	if dists {
		s.Pickup, s.Run = distStats(c.Pickup, buckets), distStats(c.Run, buckets)
	}
	return s
}

// NewServiceStats builds ServiceStats from a Stats snapshot and, when r is
// not nil, the router's counters.
func NewServiceStats(s Stats, r *Router) ServiceStats {
	out := ServiceStats{
		Worker: s.Worker, State: s.State, Slots: s.Slots, Busy: s.Busy, Idle: s.Idle,
		MinSlots: s.MinSlots, MaxSlots: s.MaxSlots, ScaleUps: s.ScaleUps, ScaleDowns: s.ScaleDowns,
		Total:      counterStats(s.Total(), true, false),
		Priorities: make([]PriorityServiceStats, 0, len(s.Priorities)),
	}
	for _, p := range s.Priorities {
		out.Priorities = append(out.Priorities, PriorityServiceStats{
			Priority:     p.Priority.String(),
			CounterStats: counterStats(p.Counters, true, true),
			Busy:         p.Busy, Backlog: p.Backlog, OldestWait: p.OldestWait, Weight: p.Weight,
		})
	}
	if len(s.Types) > 0 {
		out.Types = make(map[string]CounterStats, len(s.Types))
		for t, c := range s.Types {
			out.Types[t] = counterStats(c, false, false)
		}
	}
	if r != nil {
		rs := r.Stats()
		out.Router = &rs
	}
	return out
}

// MarshalJSON keeps RouterStats in snake_case.
func (r RouterStats) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		Routed uint64 `json:"routed"`
		Gone   uint64 `json:"gone"`
		Bad    uint64 `json:"bad"`
		Failed uint64 `json:"failed"`
	}{r.Routed, r.Gone, r.Bad, r.Failed})
}
