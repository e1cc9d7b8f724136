package service

import (
	"fmt"
	"maps"
	"regexp"
	"runtime/debug"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/spoolq/spool/consumer"
	"github.com/spoolq/spool/consumer/dlqrouter"
	"github.com/spoolq/spool/consumer/remote"
	"github.com/spoolq/spool/shared/fleet"
)

// Option configures Add.
type Option func(*config) error

type config struct {
	version  string
	metadata map[string]string
	router   *dlqrouter.Router
	remote   *remote.Routes
}

// WithVersion sets the service's SemVer version. Default: the main
// module's version from the build information, else 0.0.0.
func WithVersion(v string) Option {
	return func(c *config) error {
		if !semver.MatchString(v) {
			return fmt.Errorf("%w: service version %q is not SemVer", consumer.ErrInvalidOption, v)
		}
		c.version = v
		return nil
	}
}

// WithMetadata adds metadata (such as metrics_addr) to the service's info.
// The worker name and the prefix are always there. Default: none.
func WithMetadata(md map[string]string) Option {
	return func(c *config) error {
		maps.Copy(c.metadata, md)
		return nil
	}
}

// WithRouter adds the DLQ router's counters to the stats. Default: none.
func WithRouter(r *dlqrouter.Router) Option {
	return func(c *config) error { c.router = r; return nil }
}

// WithRemote adds the remote-handler routes' settings and counters to the
// stats (field remote). Default: none.
func WithRemote(r *remote.Routes) Option {
	return func(c *config) error { c.remote = r; return nil }
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

// Subject is the subject of a worker's stats endpoint:
// <prefix>.svc.consumer.<worker>.<service-id>.stats, the worker name reduced
// to one subject token (two processes may share a name; the service id tells
// them apart). A request there returns the worker's fleet.WorkerStats.
func Subject(prefix, worker, id string) string {
	return prefix + ".svc.consumer." + subjectToken(worker) + "." + subjectToken(id) + ".stats"
}

// Add registers w as an instance of the fleet.ServiceName micro service on
// nc. Its one endpoint, "stats" (Subject), answers with the live
// fleet.WorkerStats, which also fill the endpoint's data in $SRV.STATS
// replies. Stop the returned service before closing nc; it also stops when
// nc closes.
func Add(nc *nats.Conn, w *consumer.Worker, opts ...Option) (micro.Service, error) {
	cfg := config{version: buildVersion(), metadata: map[string]string{}}
	for _, o := range opts {
		if err := o(&cfg); err != nil {
			return nil, err
		}
	}
	name, prefix := w.Name(), w.Names().Prefix()
	cfg.metadata["worker"] = name
	cfg.metadata["prefix"] = prefix
	cfg.metadata[fleet.MetadataConformance] = fleet.ConformanceFull
	stats := func() fleet.WorkerStats {
		st := workerStats(w.Stats(), cfg.router)
		if cfg.remote != nil {
			st.Remote = cfg.remote.Stats()
		}
		return st
	}
	svc, err := micro.AddService(nc, micro.Config{
		Name:         fleet.ServiceName,
		Version:      cfg.version,
		Description:  "Spool worker: pulls tasks by priority and runs their handlers",
		Metadata:     cfg.metadata,
		StatsHandler: func(*micro.Endpoint) any { return stats() },
	})
	if err != nil {
		return nil, fmt.Errorf("registering the %s service: %w", fleet.ServiceName, err)
	}
	err = svc.AddEndpoint("stats", micro.HandlerFunc(func(req micro.Request) {
		_ = req.RespondJSON(stats()) // the requester may be gone; nothing to do then
	}), micro.WithEndpointSubject(Subject(prefix, name, svc.Info().ID)),
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

func counterStats(c consumer.Counters, dists, buckets bool) fleet.CounterStats {
	s := fleet.CounterStats{Processed: c.Processed, Completed: c.Completed, Failed: c.Failed, Retried: c.Retried, WriteRetries: c.WriteRetries, Dead: c.Dead, Returned: c.Returned}
	if dists {
		s.Pickup, s.Run = fleet.Summarize(c.Pickup, buckets), fleet.Summarize(c.Run, buckets)
	}
	return s
}

// workerStats builds the published figures from a Stats snapshot and, when
// r is not nil, the router's counters.
func workerStats(s consumer.Stats, r *dlqrouter.Router) fleet.WorkerStats {
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
