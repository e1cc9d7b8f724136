package consumer

import (
	"fmt"
	"maps"
	"regexp"
	"runtime/debug"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/spoolq/spool/shared/fleet"
)

// ServiceName is the NATS service (micro) name every worker registers
// under: `nats micro ls`, `nats micro info spool-consumer` and `nats micro
// stats spool-consumer` list the fleet.
const ServiceName = fleet.ServiceName

// ServiceOption configures AddService.
type ServiceOption func(*serviceConfig) error

type serviceConfig struct {
	version  string
	metadata map[string]string
	router   interface{ Stats() fleet.RouterStats }
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
func WithServiceRouter(r interface{ Stats() fleet.RouterStats }) ServiceOption {
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
	stats := func() fleet.WorkerStats { return NewServiceStats(w.Stats(), cfg.router) }
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

func counterStats(c Counters, dists, buckets bool) fleet.CounterStats {
	s := fleet.CounterStats{Processed: c.Processed, Completed: c.Completed, Failed: c.Failed, Retried: c.Retried, Dead: c.Dead, Returned: c.Returned}
	if dists {
		s.Pickup, s.Run = fleet.Summarize(c.Pickup, buckets), fleet.Summarize(c.Run, buckets)
	}
	return s
}

// NewServiceStats builds the published figures from a Stats snapshot and,
// when r is not nil, the router's counters.
func NewServiceStats(s Stats, r interface{ Stats() fleet.RouterStats }) fleet.WorkerStats {
	out := fleet.WorkerStats{
		Worker: s.Worker, State: string(s.State), Slots: s.Slots, Busy: s.Busy, Idle: s.Idle,
		MinSlots: s.MinSlots, MaxSlots: s.MaxSlots, ScaleUps: s.ScaleUps, ScaleDowns: s.ScaleDowns,
		Total:      counterStats(s.Total(), true, false),
		Priorities: make([]fleet.PriorityStats, 0, len(s.Priorities)),
	}
	for _, p := range s.Priorities {
		out.Priorities = append(out.Priorities, fleet.PriorityStats{
			Priority:     p.Priority.String(),
			CounterStats: counterStats(p.Counters, true, true),
			Busy:         p.Busy, Backlog: p.Backlog, OldestWait: p.OldestWait, Weight: p.Weight,
		})
	}
	if len(s.Types) > 0 {
		out.Types = make(map[string]fleet.CounterStats, len(s.Types))
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
