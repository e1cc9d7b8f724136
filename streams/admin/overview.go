package admin

import (
	"context"
	"encoding/json"
	"time"

	"github.com/spoolq/spool/shared/fleet"
)

// Overview is what the dashboard shows: the queue's status and the
// consumer fleet, read at the same time. Its JSON is the document of the
// broker's GET /v1/overview (see MarshalJSON).
type Overview struct {
	// Time is when the figures were read (UTC).
	Time   time.Time
	Status Status
	Fleet  Fleet
	// FleetError says why the fleet could not be asked; the queue's
	// figures are still good.
	FleetError string
}

// Overview reads the queue's status and, at the same time, asks the
// fleet. It fails when the status cannot be read; a fleet that cannot be
// asked is reported in FleetError.
func (c *Client) Overview(ctx context.Context) (Overview, error) {
	return call(ctx, c, "reading the queue's status", c.overview)
}

func (c *Client) overview(ctx context.Context) (Overview, error) {
	type fleetAnswer struct {
		workers []Worker
		err     error
	}
	fleetc := make(chan fleetAnswer, 1)
	go func() {
		w, err := c.workers(ctx)
		fleetc <- fleetAnswer{w, err}
	}()
	st, err := c.status(ctx)
	fa := <-fleetc
	if err != nil {
		return Overview{}, err
	}
	ov := Overview{Time: time.Now().UTC(), Status: st, Fleet: Fleet{Workers: fa.workers, Totals: sum(fa.workers)}}
	if fa.err != nil {
		ov.FleetError = fa.err.Error()
		c.logger.DebugContext(ctx, "asking the fleet", "error", fa.err)
	}
	return ov, nil
}

// MarshalJSON writes the dashboard's document: the status's fields (with
// how workers pull and the unserved task types), each
// priority with the fleet's processed count and busy slots for it (absent
// when no worker reports the priority), "fleet" with one member per worker
// and its figures, "fleet_error", and "totals" whose pickup and run carry
// the merged histogram (bounds_ns, counts) for the page to diff.
func (o Overview) MarshalJSON() ([]byte, error) {
	doc := overviewDoc{
		Time:        o.Time,
		Scheduled:   o.Status.Scheduled,
		Parked:      o.Status.Parked,
		Held:        o.Status.Held,
		WaitingRoom: o.Status.WaitingRoom,
		DeadLetters: o.Status.DeadLetters,
		Results:     o.Status.Results,
		StoreBytes:  o.Status.StoreBytes,
		Consumers:   o.Status.Consumers,
		Unserved:    o.Status.Unserved,
		Types:       o.Status.Types,
		Fleet:       make([]memberDoc, 0, len(o.Fleet.Workers)),
		FleetError:  o.FleetError,
		Totals:      totalsDocOf(o.Fleet.Totals),
	}
	byName := map[string]PriorityTotals{}
	for _, pt := range o.Fleet.Totals.Priorities {
		byName[pt.Priority] = pt
	}
	for _, ps := range o.Status.Priorities {
		pd := priorityDoc{PriorityStatus: ps}
		if pt, ok := byName[ps.Priority.String()]; ok {
			pd.Processed, pd.Busy = &pt.Processed, &pt.Busy
		}
		doc.Priorities = append(doc.Priorities, pd)
	}
	for _, w := range o.Fleet.Workers {
		doc.Fleet = append(doc.Fleet, memberDoc{Worker: w, Figures: figuresOf(w)})
	}
	return json.Marshal(doc)
}

// The document's shape. Fields a worker does not report are absent
// (pointers), so the page tells "0" from "unknown".
type (
	overviewDoc struct {
		Time        time.Time      `json:"time"`
		Priorities  []priorityDoc  `json:"priorities"`
		Scheduled   uint64         `json:"scheduled"`
		Parked      uint64         `json:"parked"`
		Held        uint64         `json:"held"`
		WaitingRoom uint64         `json:"waiting_room"`
		DeadLetters uint64         `json:"dead_letters"`
		Results     uint64         `json:"results"`
		StoreBytes  uint64         `json:"store_bytes"`
		Consumers   string         `json:"consumers"`
		Unserved    []UnservedType `json:"unserved,omitempty"`
		Types       []TypeStatus   `json:"types,omitempty"`
		Fleet       []memberDoc    `json:"fleet"`
		FleetError  string         `json:"fleet_error,omitempty"`
		Totals      totalsDoc      `json:"totals"`
	}
	priorityDoc struct {
		PriorityStatus
		Processed *uint64 `json:"processed,omitempty"`
		Busy      *int    `json:"busy,omitempty"`
	}
	// memberDoc is a Worker with figures in place of its stats.
	memberDoc struct {
		Worker
		Stats   *struct{}  `json:"stats,omitempty"` // nil: hides Worker.Stats
		Figures figuresDoc `json:"figures"`
	}
	// poolDoc are the figures a worker and the fleet's totals share.
	poolDoc struct {
		Slots     *int    `json:"slots,omitempty"`
		Busy      *int    `json:"busy,omitempty"`
		Idle      *int    `json:"idle,omitempty"`
		Processed *uint64 `json:"processed,omitempty"`
		Completed *uint64 `json:"completed,omitempty"`
		Failed    *uint64 `json:"failed,omitempty"`
	}
	figuresDoc struct {
		Worker string `json:"worker,omitempty"`
		State  string `json:"state,omitempty"`
		poolDoc
		Retried      *uint64           `json:"retried,omitempty"`
		WriteRetries *uint64           `json:"write_retries,omitempty"`
		Dead         *uint64           `json:"dead,omitempty"`
		Pickup       *percentilesDoc   `json:"pickup,omitempty"`
		Run          *percentilesDoc   `json:"run,omitempty"`
		Priorities   []priorityFigures `json:"priorities,omitempty"`
	}
	priorityFigures struct {
		Priority  string  `json:"priority"`
		Processed *uint64 `json:"processed,omitempty"`
		Busy      *int    `json:"busy,omitempty"`
	}
	// percentilesDoc: Count is 0 when only percentiles were reported;
	// BoundsNS and Counts (totals only) are the merged histogram, Counts[i]
	// values up to BoundsNS[i], the last one above.
	percentilesDoc struct {
		Count    uint64        `json:"count,omitempty"`
		P50      time.Duration `json:"p50_ns"`
		P95      time.Duration `json:"p95_ns"`
		P99      time.Duration `json:"p99_ns"`
		BoundsNS []int64       `json:"bounds_ns,omitempty"`
		Counts   []uint64      `json:"counts,omitempty"`
	}
	totalsDoc struct {
		Members int `json:"members"`
		poolDoc
		Dead   *uint64         `json:"dead,omitempty"`
		Pickup *percentilesDoc `json:"pickup,omitempty"`
		Run    *percentilesDoc `json:"run,omitempty"`
	}
)

// figuresOf is a worker's figures: its stats, with the pickup and run
// percentiles of its histograms when it reports bucket counts, else of its
// total's summary.
func figuresOf(w Worker) figuresDoc {
	f := figuresDoc{Worker: w.WorkerName()}
	ws := w.Stats
	if ws == nil {
		return f
	}
	t := ws.Total
	f.State = ws.State
	f.poolDoc = pool(ws.Slots, ws.Busy, ws.Idle, t)
	f.Retried, f.WriteRetries, f.Dead = &t.Retried, &t.WriteRetries, &t.Dead
	f.Pickup = workerPercentiles(PickupHistogram(*ws))
	if f.Pickup == nil {
		f.Pickup = summaryPercentiles(t.Pickup)
	}
	f.Run = workerPercentiles(RunHistogram(*ws))
	if f.Run == nil {
		f.Run = summaryPercentiles(t.Run)
	}
	for i := range ws.Priorities {
		p := &ws.Priorities[i]
		f.Priorities = append(f.Priorities, priorityFigures{Priority: p.Priority, Processed: &p.Processed, Busy: &p.Busy})
	}
	return f
}

func workerPercentiles(h fleet.Histogram, ok bool) *percentilesDoc {
	if !ok {
		return nil
	}
	return &percentilesDoc{Count: h.Count, P50: h.Quantile(0.50), P95: h.Quantile(0.95), P99: h.Quantile(0.99)}
}

func summaryPercentiles(d *fleet.DistStats) *percentilesDoc {
	if d == nil {
		return nil
	}
	return &percentilesDoc{Count: d.Count, P50: d.P50, P95: d.P95, P99: d.P99}
}

// bucketPercentiles are a merged histogram's percentiles with its buckets.
func bucketPercentiles(d *fleet.DistStats) *percentilesDoc {
	h, ok := d.Histogram()
	if !ok {
		return nil
	}
	p := workerPercentiles(h, true)
	p.Counts = h.Counts
	for _, b := range fleet.Bounds() {
		p.BoundsNS = append(p.BoundsNS, int64(b))
	}
	return p
}

func totalsDocOf(t Totals) totalsDoc {
	doc := totalsDoc{Members: t.Workers}
	if t.Reporting == 0 {
		return doc
	}
	c := t.Counters
	doc.poolDoc = pool(t.Slots, t.Busy, t.Idle, c)
	doc.Dead = &c.Dead
	doc.Pickup, doc.Run = bucketPercentiles(c.Pickup), bucketPercentiles(c.Run)
	return doc
}

func pool(slots, busy, idle int, c fleet.CounterStats) poolDoc {
	return poolDoc{Slots: &slots, Busy: &busy, Idle: &idle, Processed: &c.Processed, Completed: &c.Completed, Failed: &c.Failed}
}
