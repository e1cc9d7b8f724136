package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	spool "github.com/spoolq/spool/shared"
	"github.com/spoolq/spool/shared/fleet"
)

// Fleet is every consumer process that answered, and their sums.
type Fleet struct {
	// Workers are sorted by service name, worker name and service id.
	Workers []Worker `json:"workers"`
	// Totals sum the workers' stats.
	Totals Totals `json:"totals"`
}

// Worker is one consumer process, as its $SRV.STATS answer describes it.
type Worker struct {
	// Name, ID, Version, Metadata and Started are the service's.
	Name     string            `json:"name"`
	ID       string            `json:"id"`
	Version  string            `json:"version"`
	Metadata map[string]string `json:"metadata,omitempty"`
	Started  time.Time         `json:"started"`
	// Endpoints are the service's endpoints with their raw stats data.
	Endpoints []Endpoint `json:"endpoints"`
	// Stats are the worker's figures, decoded from the first endpoint data
	// that is a fleet.WorkerStats; nil when none is.
	Stats *fleet.WorkerStats `json:"stats,omitempty"`
}

// WorkerName is the worker's name: its stats', else its service metadata's
// "worker".
func (w Worker) WorkerName() string {
	if w.Stats != nil && w.Stats.Worker != "" {
		return w.Stats.Worker
	}
	return w.Metadata["worker"]
}

// Endpoint is one service endpoint's stats.
type Endpoint struct {
	Name        string          `json:"name"`
	Subject     string          `json:"subject"`
	NumRequests int             `json:"num_requests"`
	NumErrors   int             `json:"num_errors"`
	LastError   string          `json:"last_error,omitempty"`
	Data        json.RawMessage `json:"data,omitempty"`
}

// Totals sum the stats of the workers that report them.
type Totals struct {
	// Workers counts the processes that answered, Reporting those whose
	// stats could be read (the rest count nowhere else).
	Workers   int `json:"workers"`
	Reporting int `json:"reporting"`
	// Slots, Busy and Idle sum the workers' pools.
	Slots int `json:"slots"`
	Busy  int `json:"busy"`
	Idle  int `json:"idle"`
	// Counters sum the workers' total counters. Their Pickup and Run merge
	// the workers' histograms (with bucket counts); absent when no worker
	// reports one.
	Counters fleet.CounterStats `json:"counters"`
	// Priorities sum each priority's counters and busy slots over the
	// workers that report the priority, most urgent first; a priority no
	// worker reports is absent.
	Priorities []PriorityTotals `json:"priorities"`
}

// PriorityTotals are one priority's sums over the fleet.
type PriorityTotals struct {
	Priority string `json:"priority"`
	fleet.CounterStats
	Busy int `json:"busy"`
}

// Fleet asks every consumer process (the fleet.ServiceName micro service)
// for its stats and sums them. Answers are collected for the fleet wait
// (WithFleetWait) or until ctx ends; a fleet with no member answers at
// once.
func (c *Client) Fleet(ctx context.Context) (Fleet, error) {
	return read(ctx, c, func(ctx context.Context) (Fleet, error) {
		workers, err := c.workers(ctx)
		if err != nil {
			return Fleet{}, err
		}
		return Fleet{Workers: workers, Totals: sum(workers)}, nil
	})
}

// workers sends $SRV.STATS.<service> and collects every answer that comes
// within the fleet wait.
func (c *Client) workers(ctx context.Context) ([]Worker, error) {
	var workers []Worker
	_, err := c.ask(ctx, micro.StatsVerb, 0, func(data []byte) {
		var st micro.Stats
		if err := json.Unmarshal(data, &st); err != nil {
			c.logger.DebugContext(ctx, "leaving out a fleet answer that is not service stats", "error", err)
			return
		}
		workers = append(workers, worker(st))
	})
	if err != nil {
		return nil, err
	}
	slices.SortFunc(workers, func(a, b Worker) int {
		return strings.Compare(a.Name+a.WorkerName()+a.ID, b.Name+b.WorkerName()+b.ID)
	})
	return workers, nil
}

// ask sends the $SRV request verb to every consumer process and hands each
// answer's body to each, until the fleet wait or ctx ends, or, when quiet
// is positive, until quiet passes after an answer without another one.
// none reports that no process listens: the server answered no responders
// at once.
func (c *Client) ask(ctx context.Context, verb micro.Verb, quiet time.Duration, each func(data []byte)) (none bool, err error) {
	subject, err := micro.ControlSubject(verb, fleet.ServiceName, "")
	if err != nil {
		return false, fmt.Errorf("%s subject of %q: %w", verb, fleet.ServiceName, err)
	}
	inbox := c.nc.NewRespInbox()
	sub, err := c.nc.SubscribeSync(inbox)
	if err != nil {
		return false, fmt.Errorf("subscribing to %s: %w", inbox, err)
	}
	defer func() { _ = sub.Unsubscribe() }() // the connection may be gone; nothing to do then
	if err := c.nc.PublishRequest(subject, inbox, nil); err != nil {
		return false, fmt.Errorf("requesting %s: %w", subject, err)
	}
	ctx, cancel := context.WithTimeout(ctx, c.fleetWait)
	defer cancel()
	answered := false
	for {
		next, stop := ctx, context.CancelFunc(func() {})
		if quiet > 0 && answered {
			next, stop = context.WithTimeout(ctx, quiet)
		}
		msg, err := sub.NextMsgWithContext(next)
		stop()
		switch {
		case errors.Is(err, nats.ErrNoResponders):
			return true, nil // no consumer registered the service
		case err != nil:
			return false, nil // the wait is over (or the connection went away)
		case msg.Header.Get("Status") == "503":
			return true, nil // no responders, as older clients pass it on
		}
		each(msg.Data)
		answered = true
	}
}

func worker(st micro.Stats) Worker {
	w := Worker{Name: st.Name, ID: st.ID, Version: st.Version, Metadata: st.Metadata, Started: st.Started}
	for _, e := range st.Endpoints {
		if e == nil {
			continue
		}
		w.Endpoints = append(w.Endpoints, Endpoint{
			Name: e.Name, Subject: e.Subject, NumRequests: e.NumRequests, NumErrors: e.NumErrors,
			LastError: e.LastError, Data: e.Data,
		})
		if w.Stats == nil {
			w.Stats = decodeStats(e.Data)
		}
	}
	return w
}

// decodeStats reads an endpoint's data as the consumer writes it; nil when
// it is not a worker's stats (empty, not an object, or naming no worker and
// no priority).
func decodeStats(data json.RawMessage) *fleet.WorkerStats {
	if len(data) == 0 {
		return nil
	}
	var ws fleet.WorkerStats
	if err := json.Unmarshal(data, &ws); err != nil || (ws.Worker == "" && len(ws.Priorities) == 0) {
		return nil
	}
	return &ws
}

// PickupHistogram is the worker's pickup-latency histogram: its total's
// when that carries bucket counts, else the merge of its priorities'. ok is
// false when the worker reports no bucket counts.
func PickupHistogram(ws fleet.WorkerStats) (h fleet.Histogram, ok bool) {
	return histogram(ws, func(c fleet.CounterStats) *fleet.DistStats { return c.Pickup })
}

// RunHistogram is the worker's run-time histogram, as PickupHistogram.
func RunHistogram(ws fleet.WorkerStats) (h fleet.Histogram, ok bool) {
	return histogram(ws, func(c fleet.CounterStats) *fleet.DistStats { return c.Run })
}

func histogram(ws fleet.WorkerStats, dist func(fleet.CounterStats) *fleet.DistStats) (fleet.Histogram, bool) {
	if h, ok := dist(ws.Total).Histogram(); ok {
		return h, true
	}
	var merged fleet.Histogram
	found := false
	for _, p := range ws.Priorities {
		if h, ok := dist(p.CounterStats).Histogram(); ok {
			merged.Merge(h)
			found = true
		}
	}
	return merged, found
}

// sum totals the workers' stats.
func sum(workers []Worker) Totals {
	t := Totals{Workers: len(workers)}
	var pickup, run fleet.Histogram
	var hasPickup, hasRun bool
	prios := map[string]*PriorityTotals{}
	for _, w := range workers {
		ws := w.Stats
		if ws == nil {
			continue
		}
		t.Reporting++
		t.Slots += ws.Slots
		t.Busy += ws.Busy
		t.Idle += ws.Idle
		addCounters(&t.Counters, ws.Total)
		if h, ok := PickupHistogram(*ws); ok {
			pickup.Merge(h)
			hasPickup = true
		}
		if h, ok := RunHistogram(*ws); ok {
			run.Merge(h)
			hasRun = true
		}
		for _, p := range ws.Priorities {
			pt, ok := prios[p.Priority]
			if !ok {
				pt = &PriorityTotals{Priority: p.Priority}
				prios[p.Priority] = pt
			}
			addCounters(&pt.CounterStats, p.CounterStats)
			pt.Busy += p.Busy
		}
	}
	if hasPickup {
		t.Counters.Pickup = fleet.Summarize(pickup, true)
	}
	if hasRun {
		t.Counters.Run = fleet.Summarize(run, true)
	}
	for _, p := range spool.Priorities {
		if pt, ok := prios[p.String()]; ok {
			t.Priorities = append(t.Priorities, *pt)
		}
	}
	return t
}

// addCounters adds c's counters to sum (not its distributions).
func addCounters(sum *fleet.CounterStats, c fleet.CounterStats) {
	sum.Processed += c.Processed
	sum.Completed += c.Completed
	sum.Failed += c.Failed
	sum.Retried += c.Retried
	sum.WriteRetries += c.WriteRetries
	sum.Dead += c.Dead
	sum.Returned += c.Returned
}
