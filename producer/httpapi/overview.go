package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/spoolq/spool/producer"
	spool "github.com/spoolq/spool/shared"
	"github.com/spoolq/spool/streams"
)

// Dashboard timings.
const (
	// OverviewCacheTTL is how long one GET /v1/overview answer is reused, so
	// that many open dashboards cost JetStream one status read per TTL.
	OverviewCacheTTL = 500 * time.Millisecond
	// FleetWait is how long the overview collects the consumers' answers to
	// $SRV.STATS.<FleetService>.
	FleetWait = 250 * time.Millisecond
	// overviewTimeout bounds one overview read.
	overviewTimeout = 3 * time.Second
)

// FleetService is the NATS micro service name consumer processes register.
const FleetService = "spool-consumer"

// Overview is the answer of GET /v1/overview: the queue's status
// (streams.ReadStatus) and the consumer fleet's figures (the NATS service
// API's STATS of every FleetService instance).
type Overview struct {
	// Time is when the figures were read.
	Time       time.Time          `json:"time"`
	Priorities []OverviewPriority `json:"priorities"`
	// Scheduled, DeadLetters, Results and StoreBytes are streams.Status's.
	Scheduled   uint64 `json:"scheduled"`
	DeadLetters uint64 `json:"dead_letters"`
	Results     uint64 `json:"results"`
	StoreBytes  uint64 `json:"store_bytes"`
	// Fleet has one member per consumer process that answered, sorted by
	// name; empty when none runs (or none registers the service).
	Fleet []FleetMember `json:"fleet"`
	// FleetError says why the fleet could not be asked; the queue figures
	// are still good.
	FleetError string `json:"fleet_error,omitempty"`
	// Totals sum the fleet's known figures.
	Totals FleetTotals `json:"totals"`
}

// OverviewPriority is one priority's queue status with the fleet's figures
// for it, when members report them.
type OverviewPriority struct {
	streams.PriorityStatus
	// Processed is the fleet's cumulative count of finished attempts of
	// the priority; absent when no member reports it.
	Processed *uint64 `json:"processed,omitempty"`
	// Busy is the fleet's slots running tasks of the priority.
	Busy *int `json:"busy,omitempty"`
}

// FleetMember is one consumer process as its service STATS describe it.
type FleetMember struct {
	Name     string            `json:"name"`
	ID       string            `json:"id"`
	Version  string            `json:"version"`
	Metadata map[string]string `json:"metadata,omitempty"`
	Started  time.Time         `json:"started"`
	// Endpoints are rendered generically by the page: their data is any JSON.
	Endpoints []FleetEndpoint `json:"endpoints"`
	// Figures are the known fields found in the endpoints' data.
	Figures WorkerFigures `json:"figures"`
}

// FleetEndpoint is one service endpoint's stats.
type FleetEndpoint struct {
	Name        string          `json:"name"`
	Subject     string          `json:"subject"`
	NumRequests int             `json:"num_requests"`
	NumErrors   int             `json:"num_errors"`
	LastError   string          `json:"last_error,omitempty"`
	Data        json.RawMessage `json:"data,omitempty"`
}

// WorkerFigures are the figures a worker may report in its stats data, each
// absent when not reported. Field names are matched case-insensitively and
// without underscores, so both consumer.Stats's Go names ("Busy",
// "Priorities") and snake_case ("busy", "priorities") are read.
type WorkerFigures struct {
	Worker     string            `json:"worker,omitempty"`
	State      string            `json:"state,omitempty"`
	Slots      *int              `json:"slots,omitempty"`
	Busy       *int              `json:"busy,omitempty"`
	Idle       *int              `json:"idle,omitempty"`
	Processed  *uint64           `json:"processed,omitempty"`
	Completed  *uint64           `json:"completed,omitempty"`
	Failed     *uint64           `json:"failed,omitempty"`
	Retried    *uint64           `json:"retried,omitempty"`
	Dead       *uint64           `json:"dead,omitempty"`
	Pickup     *Percentiles      `json:"pickup,omitempty"`
	Run        *Percentiles      `json:"run,omitempty"`
	Priorities []PriorityFigures `json:"priorities,omitempty"`

	pickupHist, runHist *histogram // for fleet-wide percentiles
}

// PriorityFigures are a worker's figures for one priority.
type PriorityFigures struct {
	Priority  string  `json:"priority"`
	Processed *uint64 `json:"processed,omitempty"`
	Busy      *int    `json:"busy,omitempty"`
}

// Percentiles of a duration distribution. Count is 0 when only the
// percentiles were reported.
type Percentiles struct {
	Count uint64        `json:"count,omitempty"`
	P50   time.Duration `json:"p50_ns"`
	P95   time.Duration `json:"p95_ns"`
	P99   time.Duration `json:"p99_ns"`
	// BoundsNS and Counts are the merged histogram (FleetTotals only):
	// Counts[i] values up to BoundsNS[i], the last one above. The page
	// diffs successive samples for the percentiles of the last minute.
	BoundsNS []int64  `json:"bounds_ns,omitempty"`
	Counts   []uint64 `json:"counts,omitempty"`
}

// FleetTotals sum the members' figures. Pickup and Run merge the members'
// histograms, so they are only present when members report histograms
// (consumer.Distribution); percentiles cannot be merged.
type FleetTotals struct {
	Members   int          `json:"members"`
	Slots     *int         `json:"slots,omitempty"`
	Busy      *int         `json:"busy,omitempty"`
	Idle      *int         `json:"idle,omitempty"`
	Processed *uint64      `json:"processed,omitempty"`
	Completed *uint64      `json:"completed,omitempty"`
	Failed    *uint64      `json:"failed,omitempty"`
	Dead      *uint64      `json:"dead,omitempty"`
	Pickup    *Percentiles `json:"pickup,omitempty"`
	Run       *Percentiles `json:"run,omitempty"`
}

// dashboard serves GET /v1/overview from a short-lived cache.
type dashboard struct {
	client *producer.Client
	logger *slog.Logger
	ttl    time.Duration
	wait   time.Duration

	mu     sync.Mutex // held while reading, so concurrent requests share one read
	readAt time.Time
	last   Overview
	err    error
}

func newDashboard(client *producer.Client, logger *slog.Logger) *dashboard {
	return &dashboard{client: client, logger: logger, ttl: OverviewCacheTTL, wait: FleetWait}
}

func (d *dashboard) overview(w http.ResponseWriter, r *http.Request) {
	ov, err := d.cached(r.Context())
	if err != nil {
		writeError(w, d.logger, r, newError(http.StatusServiceUnavailable, CodeUnavailable, "", err.Error()))
		return
	}
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, d.logger, r, http.StatusOK, ov)
}

// cached returns the last overview when it is younger than the TTL, else
// reads a new one. Errors are cached too: a dashboard polling an
// unreachable server must not queue requests behind it.
func (d *dashboard) cached(ctx context.Context) (Overview, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.readAt.IsZero() && time.Since(d.readAt) < d.ttl {
		return d.last, d.err
	}
	// One caller's cancellation must not poison the answer others share.
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), overviewTimeout)
	defer cancel()
	d.last, d.err = d.read(rctx)
	d.readAt = time.Now()
	return d.last, d.err
}

// read reads the queue status and, at the same time, asks the fleet.
func (d *dashboard) read(ctx context.Context) (Overview, error) {
	js := d.client.JetStream()
	nc := js.Conn()
	if !nc.IsConnected() {
		return Overview{}, fmt.Errorf("nats connection is %s", strings.ToLower(nc.Status().String()))
	}
	type fleetAnswer struct {
		members []FleetMember
		err     error
	}
	fleetc := make(chan fleetAnswer, 1)
	go func() {
		m, err := readFleet(ctx, nc, FleetService, d.wait)
		fleetc <- fleetAnswer{m, err}
	}()
	st, err := streams.ReadStatus(ctx, js, d.client.Names())
	fleet := <-fleetc
	if err != nil {
		return Overview{}, fmt.Errorf("reading the queue status: %w", err)
	}
	ov := Overview{
		Time:        time.Now().UTC(),
		Scheduled:   st.Scheduled,
		DeadLetters: st.DeadLetters,
		Results:     st.Results,
		StoreBytes:  st.StoreBytes,
		Fleet:       fleet.members,
	}
	if ov.Fleet == nil {
		ov.Fleet = []FleetMember{}
	}
	if fleet.err != nil {
		ov.FleetError = fleet.err.Error()
		d.logger.DebugContext(ctx, "asking the fleet", "error", fleet.err)
	}
	for _, ps := range st.Priorities {
		ov.Priorities = append(ov.Priorities, OverviewPriority{PriorityStatus: ps})
	}
	ov.Totals = totals(ov.Fleet, ov.Priorities)
	return ov, nil
}

// readFleet sends $SRV.STATS.<service> and collects every answer that comes
// within wait.
func readFleet(ctx context.Context, nc *nats.Conn, service string, wait time.Duration) ([]FleetMember, error) {
	subject, err := micro.ControlSubject(micro.StatsVerb, service, "")
	if err != nil {
		return nil, fmt.Errorf("stats subject of %q: %w", service, err)
	}
	inbox := nc.NewRespInbox()
	sub, err := nc.SubscribeSync(inbox)
	if err != nil {
		return nil, fmt.Errorf("subscribing to %s: %w", inbox, err)
	}
	defer func() { _ = sub.Unsubscribe() }() // the connection may be gone; nothing to do then
	if err := nc.PublishRequest(subject, inbox, nil); err != nil {
		return nil, fmt.Errorf("requesting %s: %w", subject, err)
	}
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	var members []FleetMember
	for {
		msg, err := sub.NextMsgWithContext(ctx)
		if err != nil {
			break // the wait is over (or the connection went away)
		}
		if msg.Header.Get("Status") == "503" {
			break // no responders: no consumer registered the service
		}
		var st micro.Stats
		if err := json.Unmarshal(msg.Data, &st); err != nil {
			continue // not a stats answer; a member that cannot be read is left out
		}
		members = append(members, member(st))
	}
	slices.SortFunc(members, func(a, b FleetMember) int {
		return strings.Compare(a.Name+a.Figures.Worker+a.ID, b.Name+b.Figures.Worker+b.ID)
	})
	return members, nil
}

func member(st micro.Stats) FleetMember {
	m := FleetMember{
		Name:     st.Name,
		ID:       st.ID,
		Version:  st.Version,
		Metadata: st.Metadata,
		Started:  st.Started,
	}
	for _, e := range st.Endpoints {
		if e == nil {
			continue
		}
		m.Endpoints = append(m.Endpoints, FleetEndpoint{
			Name: e.Name, Subject: e.Subject, NumRequests: e.NumRequests, NumErrors: e.NumErrors,
			LastError: e.LastError, Data: e.Data,
		})
		if len(e.Data) > 0 && m.Figures.empty() {
			m.Figures = figures(e.Data)
		}
	}
	if m.Figures.Worker == "" {
		m.Figures.Worker = st.Metadata["worker"]
	}
	return m
}

func (f WorkerFigures) empty() bool {
	return f.Worker == "" && f.Slots == nil && f.Busy == nil && f.Processed == nil && f.Pickup == nil &&
		f.Run == nil && len(f.Priorities) == 0
}

// obj is a JSON object with normalised keys (lower case, no '_' or '-').
type obj map[string]any

func normKey(k string) string {
	return strings.ToLower(strings.NewReplacer("_", "", "-", "").Replace(k))
}

func toObj(v any) obj {
	m, ok := v.(map[string]any)
	if !ok {
		return nil
	}
	o := make(obj, len(m))
	for k, v := range m {
		o[normKey(k)] = v
	}
	return o
}

func (o obj) get(keys ...string) (any, bool) {
	for _, k := range keys {
		if v, ok := o[normKey(k)]; ok && v != nil {
			return v, true
		}
	}
	return nil, false
}

func (o obj) str(keys ...string) string {
	v, _ := o.get(keys...)
	switch v := v.(type) {
	case string:
		return v
	case json.Number:
		return v.String()
	}
	return ""
}

func (o obj) uint(keys ...string) *uint64 {
	v, ok := o.get(keys...)
	if !ok {
		return nil
	}
	n, ok := v.(json.Number)
	if !ok {
		return nil
	}
	if u, err := strconv.ParseUint(n.String(), 10, 64); err == nil {
		return &u
	}
	if f, err := n.Float64(); err == nil && f >= 0 && f < math.MaxUint64 {
		u := uint64(f)
		return &u
	}
	return nil
}

func (o obj) int(keys ...string) *int {
	u := o.uint(keys...)
	if u == nil || *u > math.MaxInt32 {
		return nil
	}
	i := int(*u)
	return &i
}

// figures reads the known fields out of one endpoint's stats data.
func figures(data json.RawMessage) WorkerFigures {
	var f WorkerFigures
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return f
	}
	o := toObj(v)
	if o == nil {
		return f
	}
	f.Worker = o.str("worker", "worker_name", "name")
	f.State = o.str("state")
	f.Slots, f.Busy, f.Idle = o.int("slots", "concurrency"), o.int("busy"), o.int("idle")
	counters := o
	if t := toObj(firstOf(o, "total", "totals")); t != nil {
		counters = t
	}
	f.Processed = counters.uint("processed")
	f.Completed = counters.uint("completed")
	f.Failed = counters.uint("failed")
	f.Retried = counters.uint("retried")
	f.Dead = counters.uint("dead")
	var pickups, runs []*histogram
	var sums struct{ processed, completed, failed, retried, dead *uint64 }
	if arr, ok := firstOf(o, "priorities").([]any); ok {
		for _, item := range arr {
			po := toObj(item)
			if po == nil {
				continue
			}
			pf := PriorityFigures{Priority: po.str("priority", "name"), Processed: po.uint("processed"), Busy: po.int("busy")}
			f.Priorities = append(f.Priorities, pf)
			// Counters missing at the top are the sum of the priorities'.
			for _, c := range []struct {
				dst  **uint64
				name string
			}{{&sums.processed, "processed"}, {&sums.completed, "completed"}, {&sums.failed, "failed"}, {&sums.retried, "retried"}, {&sums.dead, "dead"}} {
				*c.dst = addUint(*c.dst, po.uint(c.name))
			}
			pickups = append(pickups, parseHistogram(firstOf(po, "pickup")))
			runs = append(runs, parseHistogram(firstOf(po, "run")))
		}
	}
	for _, c := range []struct{ dst, sum **uint64 }{
		{&f.Processed, &sums.processed}, {&f.Completed, &sums.completed}, {&f.Failed, &sums.failed},
		{&f.Retried, &sums.retried}, {&f.Dead, &sums.dead},
	} {
		if *c.dst == nil {
			*c.dst = *c.sum
		}
	}
	f.Pickup, f.pickupHist = distribution(firstOf(counters, "pickup", "pickup_latency"), firstOf(o, "pickup", "pickup_latency"), pickups)
	f.Run, f.runHist = distribution(firstOf(counters, "run", "run_time", "runtime"), firstOf(o, "run", "run_time", "runtime"), runs)
	return f
}

func firstOf(o obj, keys ...string) any {
	v, _ := o.get(keys...)
	return v
}

// distribution reads a duration distribution, preferring histograms (they
// merge across the fleet): the first of the candidates holding one, else
// the merge of the per-priority histograms, else the first candidate's
// ready-made percentiles (consumer.ServiceStats's total has percentiles
// only, its priorities have bucket counts).
func distribution(a, b any, perPriority []*histogram) (*Percentiles, *histogram) {
	for _, c := range []any{a, b} {
		if h := parseHistogram(c); h != nil {
			return h.percentiles(), h
		}
	}
	var merged *histogram
	for _, h := range perPriority {
		merged = merged.merge(h)
	}
	if merged != nil {
		return merged.percentiles(), merged
	}
	for _, c := range []any{a, b} {
		if p := parsePercentiles(c); p != nil {
			return p, nil
		}
	}
	return nil, nil
}

// histogram is a bucketed duration distribution: counts[i] holds values up
// to bounds[i]; the last count is above the last bound.
type histogram struct {
	bounds []time.Duration
	counts []uint64
	count  uint64
}

// consumerBounds are consumer.DistributionBounds() (50µs doubling, 23
// bounds), used when a histogram does not carry its bounds. The producer
// module may not import the consumer's, so they are repeated here.
func consumerBounds() []time.Duration {
	b := make([]time.Duration, 23)
	for i := range b {
		b[i] = 50 * time.Microsecond << i
	}
	return b
}

// parseHistogram reads {"Count":n,"Counts":[...]} (consumer.Distribution)
// with optional "bounds_ns"/"Bounds" (nanoseconds).
func parseHistogram(v any) *histogram {
	o := toObj(v)
	if o == nil {
		return nil
	}
	arr, ok := firstOf(o, "counts", "buckets").([]any)
	if !ok {
		return nil
	}
	h := &histogram{counts: make([]uint64, len(arr))}
	for i, c := range arr {
		n, ok := c.(json.Number)
		if !ok {
			return nil
		}
		u, err := strconv.ParseUint(n.String(), 10, 64)
		if err != nil {
			return nil
		}
		h.counts[i] = u
		h.count += u
	}
	if bs, ok := firstOf(o, "bounds_ns", "bounds").([]any); ok {
		for _, b := range bs {
			n, ok := b.(json.Number)
			if !ok {
				return nil
			}
			f, err := n.Float64()
			if err != nil {
				return nil
			}
			h.bounds = append(h.bounds, time.Duration(f))
		}
	} else {
		h.bounds = consumerBounds()
	}
	if len(h.counts) != len(h.bounds)+1 {
		return nil
	}
	return h
}

func (h *histogram) merge(o *histogram) *histogram {
	if o == nil {
		return h
	}
	if h == nil {
		return &histogram{bounds: o.bounds, counts: slices.Clone(o.counts), count: o.count}
	}
	if !slices.Equal(h.bounds, o.bounds) {
		return h // different layouts cannot be merged; keep the first
	}
	for i, c := range o.counts {
		h.counts[i] += c
	}
	h.count += o.count
	return h
}

func (h *histogram) percentiles() *Percentiles {
	return &Percentiles{Count: h.count, P50: h.quantile(0.50), P95: h.quantile(0.95), P99: h.quantile(0.99)}
}

// withBuckets is percentiles with the histogram itself.
func (h *histogram) withBuckets() *Percentiles {
	p := h.percentiles()
	p.Counts = slices.Clone(h.counts)
	p.BoundsNS = make([]int64, len(h.bounds))
	for i, b := range h.bounds {
		p.BoundsNS[i] = int64(b)
	}
	return p
}

// quantile interpolates linearly inside the bucket holding the rank, as
// consumer.Distribution.Quantile does.
func (h *histogram) quantile(q float64) time.Duration {
	if h.count == 0 {
		return 0
	}
	rank := q * float64(h.count)
	var seen float64
	for i, c := range h.counts {
		if c == 0 {
			continue
		}
		if seen+float64(c) >= rank {
			if i == len(h.bounds) {
				return h.bounds[i-1]
			}
			lo := time.Duration(0)
			if i > 0 {
				lo = h.bounds[i-1]
			}
			frac := (rank - seen) / float64(c)
			return lo + time.Duration(frac*float64(h.bounds[i]-lo))
		}
		seen += float64(c)
	}
	return h.bounds[len(h.bounds)-1]
}

// parsePercentiles reads {"p50":…,"p95":…,"p99":…}: numbers in nanoseconds
// (keys may end in _ns, _us, _ms or _s for other units) or Go duration
// strings ("1.5ms").
func parsePercentiles(v any) *Percentiles {
	o := toObj(v)
	if o == nil {
		return nil
	}
	var p Percentiles
	found := false
	for _, q := range []struct {
		name string
		dst  *time.Duration
	}{{"p50", &p.P50}, {"p95", &p.P95}, {"p99", &p.P99}} {
		for _, unit := range []struct {
			suffix string
			scale  float64
		}{{"", 1}, {"ns", 1}, {"us", 1e3}, {"ms", 1e6}, {"s", 1e9}, {"seconds", 1e9}} {
			val, ok := o[q.name+unit.suffix]
			if !ok {
				continue
			}
			switch val := val.(type) {
			case json.Number:
				if f, err := val.Float64(); err == nil {
					*q.dst, found = time.Duration(f*unit.scale), true
				}
			case string:
				if d, err := time.ParseDuration(val); err == nil {
					*q.dst, found = d, true
				}
			}
			break
		}
	}
	if !found {
		return nil
	}
	if c := o.uint("count"); c != nil {
		p.Count = *c
	}
	return &p
}

// totals sums the fleet's figures and adds the per-priority ones to prios.
func totals(fleet []FleetMember, prios []OverviewPriority) FleetTotals {
	t := FleetTotals{Members: len(fleet)}
	var pickup, run *histogram
	for _, m := range fleet {
		f := m.Figures
		t.Slots = addInt(t.Slots, f.Slots)
		t.Busy = addInt(t.Busy, f.Busy)
		t.Idle = addInt(t.Idle, f.Idle)
		t.Processed = addUint(t.Processed, f.Processed)
		t.Completed = addUint(t.Completed, f.Completed)
		t.Failed = addUint(t.Failed, f.Failed)
		t.Dead = addUint(t.Dead, f.Dead)
		pickup = pickup.merge(f.pickupHist)
		run = run.merge(f.runHist)
		for _, pf := range f.Priorities {
			p, err := spool.ParsePriority(pf.Priority)
			if err != nil {
				continue
			}
			for i := range prios {
				if prios[i].Priority == p {
					prios[i].Processed = addUint(prios[i].Processed, pf.Processed)
					prios[i].Busy = addInt(prios[i].Busy, pf.Busy)
				}
			}
		}
	}
	if pickup != nil {
		t.Pickup = pickup.withBuckets()
	}
	if run != nil {
		t.Run = run.withBuckets()
	}
	return t
}

func addInt(sum, v *int) *int {
	if v == nil {
		return sum
	}
	n := *v
	if sum != nil {
		n += *sum
	}
	return &n
}

func addUint(sum, v *uint64) *uint64 {
	if v == nil {
		return sum
	}
	n := *v
	if sum != nil {
		n += *sum
	}
	return &n
}
