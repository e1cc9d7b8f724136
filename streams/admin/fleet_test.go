package admin_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	spool "github.com/spoolq/spool/shared"
	"github.com/spoolq/spool/shared/fleet"
	"github.com/spoolq/spool/streams"
	"github.com/spoolq/spool/streams/admin"
	"github.com/spoolq/spool/streams/streamstest"
)

// addWorker registers a NATS micro service named like the consumers' whose
// stats data is data (a fleet.WorkerStats, as the consumer writes it, or
// anything else).
func addWorker(t *testing.T, nc *nats.Conn, worker string, data any) {
	t.Helper()
	svc, err := micro.AddService(nc, micro.Config{
		Name:         fleet.ServiceName,
		Version:      "0.0.1",
		Metadata:     map[string]string{"worker": worker},
		StatsHandler: func(*micro.Endpoint) any { return data },
		Endpoint: &micro.EndpointConfig{
			Subject: "spool.test.stats." + nc.NewInbox()[7:],
			Handler: micro.HandlerFunc(func(r micro.Request) { _ = r.Respond(nil) }),
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := svc.Stop(); err != nil {
			t.Error(err)
		}
	})
}

// hist is a histogram of n values in the bucket up to 50µs·2^bucket.
func hist(n uint64, bucket int) fleet.Histogram {
	h := fleet.Histogram{Count: n, Counts: make([]uint64, fleet.NumBounds+1)}
	h.Counts[bucket] = n
	return h
}

// addFleet registers three workers: w-a reports bucket counts per
// priority, w-b only ready percentiles in its total, w-c both (the bucket
// counts win).
func addFleet(t *testing.T, nc *nats.Conn) {
	t.Helper()
	addWorker(t, nc, "w-a", fleet.WorkerStats{
		Worker: "w-a", State: "busy", Slots: 4, Busy: 1, Idle: 3,
		Total: fleet.CounterStats{Processed: 12, Completed: 12},
		Priorities: []fleet.PriorityStats{
			{Priority: "high", CounterStats: fleet.CounterStats{Processed: 2, Pickup: fleet.Summarize(hist(2, 4), true), Run: fleet.Summarize(hist(2, 2), true)}},
			{Priority: "low", Busy: 1, CounterStats: fleet.CounterStats{Processed: 10, Pickup: fleet.Summarize(hist(10, 4), true), Run: fleet.Summarize(hist(10, 2), true)}},
		},
	})
	addWorker(t, nc, "w-b", fleet.WorkerStats{
		Worker: "w-b", State: "idle", Slots: 2, Idle: 2,
		Total: fleet.CounterStats{Processed: 5, Pickup: &fleet.DistStats{Count: 5, P50: time.Millisecond, P95: 2 * time.Millisecond, P99: 3 * time.Millisecond}},
	})
	addWorker(t, nc, "w-c", fleet.WorkerStats{
		Worker: "w-c", State: "idle", Slots: 3, Idle: 3,
		Total:      fleet.CounterStats{Processed: 7, Completed: 6, Failed: 1, Dead: 1, Pickup: &fleet.DistStats{Count: 7, P50: 1, P95: 2, P99: 3}},
		Priorities: []fleet.PriorityStats{{Priority: "low", CounterStats: fleet.CounterStats{Processed: 7, Pickup: fleet.Summarize(hist(7, 4), true)}}},
	})
}

func TestFleet(t *testing.T) {
	t.Parallel()
	e := streamstest.Start(t, streams.Settings{})
	addFleet(t, e.NC)
	addWorker(t, e.NC, "foreign", "not a worker's stats")
	c := newClient(t, e, admin.WithFleetWait(time.Second))
	var fl admin.Fleet
	streamstest.WaitFor(t, 10*time.Second, func() error {
		var err error
		if fl, err = c.Fleet(streamstest.Context(t)); err != nil {
			return err
		}
		if len(fl.Workers) != 4 {
			return fmt.Errorf("%d workers answered", len(fl.Workers))
		}
		return nil
	})
	var names []string
	for _, w := range fl.Workers {
		names = append(names, w.WorkerName())
		if w.Name != fleet.ServiceName || len(w.Endpoints) != 1 || len(w.Endpoints[0].Data) == 0 {
			t.Errorf("worker %+v", w)
		}
	}
	if got := strings.Join(names, ","); got != "foreign,w-a,w-b,w-c" {
		t.Fatalf("workers %s", got)
	}
	if fl.Workers[0].Stats != nil {
		t.Errorf("a foreign member has stats %+v", fl.Workers[0].Stats)
	}
	wa := fl.Workers[1].Stats
	if wa == nil || wa.Slots != 4 || wa.Total.Processed != 12 || len(wa.Priorities) != 2 {
		t.Fatalf("w-a stats %+v", wa)
	}
	if h, ok := admin.PickupHistogram(*wa); !ok || h.Count != 12 {
		t.Errorf("w-a pickup %+v", h)
	}
	if _, ok := admin.PickupHistogram(*fl.Workers[2].Stats); ok {
		t.Error("w-b reports no bucket counts, yet has a pickup histogram")
	}
	tot := fl.Totals
	if tot.Workers != 4 || tot.Reporting != 3 || tot.Slots != 9 || tot.Busy != 1 || tot.Idle != 8 ||
		tot.Counters.Processed != 24 || tot.Counters.Dead != 1 {
		t.Errorf("totals %+v", tot)
	}
	// Fleet percentiles merge histograms only: w-a's 12 and w-c's 7
	// pickups, all in the bucket (400µs, 800µs].
	p := tot.Counters.Pickup
	if p == nil || p.Count != 19 || len(p.Counts) != fleet.NumBounds+1 || p.P50 <= 400*time.Microsecond || p.P99 > 800*time.Microsecond {
		t.Errorf("fleet pickup %+v", p)
	}
	if len(tot.Priorities) != 2 || tot.Priorities[0].Priority != "high" || tot.Priorities[1].Processed != 17 || tot.Priorities[1].Busy != 1 {
		t.Errorf("priority totals %+v", tot.Priorities)
	}
}

func TestFleetEmpty(t *testing.T) {
	t.Parallel()
	e := streamstest.Start(t, streams.Settings{})
	c := newClient(t, e, admin.WithFleetWait(5*time.Second))
	start := time.Now()
	fl, err := c.Fleet(streamstest.Context(t))
	if err != nil {
		t.Fatal(err)
	}
	// No responders ends the wait at once.
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("an empty fleet took %s", d)
	}
	if len(fl.Workers) != 0 || fl.Totals.Workers != 0 || fl.Totals.Counters.Pickup != nil {
		t.Errorf("fleet %+v", fl)
	}
}

// overviewDoc is the part of the overview's JSON (GET /v1/overview) the
// dashboard reads.
type overviewDoc struct {
	Time       time.Time `json:"time"`
	Priorities []struct {
		Priority  string  `json:"priority"`
		Pending   uint64  `json:"pending"`
		InFlight  int     `json:"in_flight"`
		Processed *uint64 `json:"processed"`
		Busy      *int    `json:"busy"`
	} `json:"priorities"`
	DeadLetters uint64 `json:"dead_letters"`
	Fleet       []struct {
		Name      string `json:"name"`
		Endpoints []struct {
			Name string         `json:"name"`
			Data map[string]any `json:"data"`
		} `json:"endpoints"`
		Figures struct {
			Worker    string          `json:"worker"`
			Slots     *int            `json:"slots"`
			Busy      *int            `json:"busy"`
			Processed *uint64         `json:"processed"`
			Pickup    *percentilesDoc `json:"pickup"`
		} `json:"figures"`
	} `json:"fleet"`
	FleetError string `json:"fleet_error"`
	Totals     struct {
		Members   int             `json:"members"`
		Slots     *int            `json:"slots"`
		Processed *uint64         `json:"processed"`
		Pickup    *percentilesDoc `json:"pickup"`
	} `json:"totals"`
}

type percentilesDoc struct {
	Count    uint64   `json:"count"`
	P50      int64    `json:"p50_ns"`
	P95      int64    `json:"p95_ns"`
	P99      int64    `json:"p99_ns"`
	BoundsNS []int64  `json:"bounds_ns"`
	Counts   []uint64 `json:"counts"`
}

func TestOverview(t *testing.T) {
	t.Parallel()
	e := streamstest.Start(t, streams.Settings{Consumers: streams.ConsumersByPriority})
	ctx := streamstest.Context(t)
	for range 3 {
		if _, err := e.JS.Publish(ctx, "spool.tasks.low.ov.test", []byte("{}")); err != nil {
			t.Fatal(err)
		}
	}
	addFleet(t, e.NC)
	c := newClient(t, e, admin.WithFleetWait(time.Second))
	var ov overviewDoc
	var raw []byte
	streamstest.WaitFor(t, 10*time.Second, func() error {
		o, err := c.Overview(ctx)
		if err != nil {
			return err
		}
		if raw, err = json.Marshal(o); err != nil {
			return err
		}
		ov = overviewDoc{}
		if err := json.Unmarshal(raw, &ov); err != nil {
			return err
		}
		if len(ov.Fleet) != 3 {
			return fmt.Errorf("%d members answered", len(ov.Fleet))
		}
		// A consumer's pending count follows the stream's stores a
		// moment later (the server signals consumers from a goroutine).
		if len(ov.Priorities) == 5 && ov.Priorities[3].Pending != 3 {
			return fmt.Errorf("low shows %d pending", ov.Priorities[3].Pending)
		}
		return nil
	})
	if len(ov.Priorities) != 5 {
		t.Fatalf("priorities %+v", ov.Priorities)
	}
	low := ov.Priorities[3]
	if low.Priority != "low" || low.Pending != 3 || low.Processed == nil || *low.Processed != 17 || low.Busy == nil || *low.Busy != 1 {
		t.Fatalf("low priority %+v (processed %v)", low, low.Processed)
	}
	if ov.Priorities[0].Processed != nil {
		t.Errorf("critical has a processed count nobody reported: %d", *ov.Priorities[0].Processed)
	}
	if ov.Totals.Members != 3 || ov.FleetError != "" {
		t.Fatalf("totals %+v, error %q: %s", ov.Totals, ov.FleetError, raw)
	}
	workers := map[string]bool{}
	for _, m := range ov.Fleet {
		workers[m.Figures.Worker] = true
		if m.Name != fleet.ServiceName || len(m.Endpoints) != 1 || m.Endpoints[0].Data == nil {
			t.Errorf("member %+v", m)
		}
		switch m.Figures.Worker {
		case "w-a":
			if *m.Figures.Slots != 4 || *m.Figures.Processed != 12 || m.Figures.Pickup == nil || m.Figures.Pickup.Count != 12 {
				t.Errorf("w-a figures %+v", m.Figures)
			}
		case "w-b":
			if m.Figures.Pickup == nil || m.Figures.Pickup.P99 != int64(3*time.Millisecond) {
				t.Errorf("w-b pickup %+v", m.Figures.Pickup)
			}
		case "w-c":
			// The bucket counts win over total's ready percentiles.
			if *m.Figures.Processed != 7 || m.Figures.Pickup == nil || m.Figures.Pickup.Count != 7 || m.Figures.Pickup.P99 <= int64(400*time.Microsecond) {
				t.Errorf("w-c figures %+v pickup %+v", m.Figures, m.Figures.Pickup)
			}
		}
	}
	if !workers["w-a"] || !workers["w-b"] || !workers["w-c"] {
		t.Fatalf("workers %v", workers)
	}
	if *ov.Totals.Slots != 9 || *ov.Totals.Processed != 24 {
		t.Errorf("totals %+v", ov.Totals)
	}
	p := ov.Totals.Pickup
	if p == nil || p.Count != 19 || p.P50 <= int64(400*time.Microsecond) || p.P99 > int64(800*time.Microsecond) || p.P50 > p.P95 || p.P95 > p.P99 {
		t.Fatalf("fleet pickup %+v", p)
	}
	if len(p.BoundsNS) != fleet.NumBounds || len(p.Counts) != fleet.NumBounds+1 || p.BoundsNS[0] != int64(fleet.Bound(0)) {
		t.Errorf("fleet pickup histogram: bounds %v counts %v", p.BoundsNS, p.Counts)
	}
}

func TestOverviewEmptyFleet(t *testing.T) {
	t.Parallel()
	e := streamstest.Start(t, streams.Settings{})
	c := newClient(t, e)
	ov, err := c.Overview(streamstest.Context(t))
	if err != nil {
		t.Fatal(err)
	}
	raw, err := json.Marshal(ov)
	if err != nil {
		t.Fatal(err)
	}
	// The page expects a list, and totals without figures nobody reported.
	if s := string(raw); !strings.Contains(s, `"fleet":[]`) || !strings.Contains(s, `"totals":{"members":0}`) {
		t.Errorf("empty fleet: %s", s)
	}
	if len(ov.Status.Priorities) != len(spool.Priorities) || ov.Time.Location() != time.UTC {
		t.Errorf("overview %+v", ov)
	}
}
