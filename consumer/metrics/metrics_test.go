package metrics_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"go.uber.org/goleak"

	"github.com/spoolq/spool/consumer"
	"github.com/spoolq/spool/consumer/dlqrouter"
	"github.com/spoolq/spool/consumer/metrics"
	"github.com/spoolq/spool/shared/fleet"
	"github.com/spoolq/spool/shared/limits"
	"github.com/spoolq/spool/streams"
	"github.com/spoolq/spool/streams/dlq"
	"github.com/spoolq/spool/streams/streamstest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// gathered indexes a registry's metrics by name{label="value",...}.
type gathered map[string]*dto.Metric

func gather(t *testing.T, reg *prometheus.Registry) gathered {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	g := gathered{}
	for _, f := range fams {
		for _, m := range f.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
			}
			g[f.GetName()+"{"+strings.Join(labels, ",")+"}"] = m
		}
	}
	return g
}

func (g gathered) value(key string) (float64, error) {
	m, ok := g[key]
	switch {
	case !ok:
		return 0, fmt.Errorf("no metric %s", key)
	case m.Counter != nil:
		return m.Counter.GetValue(), nil
	case m.Gauge != nil:
		return m.Gauge.GetValue(), nil
	case m.Histogram != nil:
		return float64(m.Histogram.GetSampleCount()), nil
	}
	return 0, fmt.Errorf("%s has no value", key)
}

func TestCollectorReadsTheWorker(t *testing.T) {
	t.Parallel()
	env := streamstest.Start(t, streams.Settings{})
	ctx := streamstest.Context(t)
	mux := consumer.NewMux()
	mux.HandleFunc("ok", func(context.Context, *consumer.Task) ([]byte, error) { return []byte("done"), nil })
	mux.HandleFunc("bad", func(context.Context, *consumer.Task) ([]byte, error) {
		return nil, consumer.Permanent(errors.New("no"))
	})
	// A flow-control rule on "ok": its leases are counted by type.
	st, err := limits.Open(ctx, env.JS, env.Names)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Put(ctx, limits.Rule{Type: "ok", Concurrency: 5}); err != nil {
		t.Fatal(err)
	}
	w, err := consumer.New(env.Connect(t), mux,
		consumer.WithLogger(streamstest.Logger(t)), consumer.WithWorkerName("metrics-worker"),
		consumer.WithPolling(100*time.Millisecond, 50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if err := w.Stop(sctx); err != nil {
			t.Error(err)
		}
	})
	router, err := dlqrouter.New(env.Connect(t), dlqrouter.WithLogger(streamstest.Logger(t)))
	if err != nil {
		t.Fatal(err)
	}
	if err := router.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := router.Stop(context.WithoutCancel(ctx)); err != nil {
			t.Error(err)
		}
	})

	reg := prometheus.NewPedanticRegistry()
	reads := 0
	d := dlq.New(env.JS, env.Names)
	reg.MustRegister(metrics.New(ctx, w, metrics.WithRouter(router), metrics.WithDeadLetters(func(ctx context.Context) (uint64, error) {
		reads++
		return d.Size(ctx)
	})))

	for _, s := range []string{"spool.tasks.high.ok", "spool.tasks.high.ok", "spool.tasks.low.bad"} {
		if _, err := env.JS.Publish(ctx, s, []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	streamstest.WaitFor(t, 20*time.Second, func() error {
		g := gather(t, reg)
		for key, want := range map[string]float64{
			`spool_tasks_completed_total{priority="high"}`:                2,
			`spool_tasks_dead_total{priority="low"}`:                      1,
			`spool_type_tasks_failed_total{type="bad"}`:                   1,
			`spool_type_tasks_processed_total{type="ok"}`:                 2,
			`spool_flow_admitted_total{type="ok"}`:                        2,
			`spool_flow_handed_back_total{limit="concurrency",type="ok"}`: 0,
			`spool_flow_slots_held{type="ok"}`:                            0,
			`spool_flow_waiting{type="ok"}`:                               0,
			`spool_pickup_seconds{priority="high"}`:                       2,
			`spool_run_seconds{priority="high"}`:                          2,
			`spool_type_run_seconds{type="ok"}`:                           2,
			`spool_dlq_messages{}`:                                        1,
		} {
			got, err := g.value(key)
			if err != nil {
				return err
			}
			if got != want {
				return fmt.Errorf("%s = %g, want %g", key, got, want)
			}
		}
		return nil
	})
	g := gather(t, reg)
	for _, key := range []string{
		`spool_slots{state="busy"}`, `spool_slots{state="idle"}`, `spool_slots_max{}`, `spool_backlog{priority="idle"}`,
		`spool_oldest_wait_seconds{priority="critical"}`, `spool_worker_info{worker="metrics-worker"}`,
		`spool_worker_state{state="stopped"}`, `spool_dlq_router_routed_total{}`, `spool_scale_steps_total{direction="up"}`,
	} {
		if _, err := g.value(key); err != nil {
			t.Error(err)
		}
	}
	h := g[`spool_run_seconds{priority="high"}`].GetHistogram()
	if b := h.GetBucket(); len(b) != len(fleet.Bounds()) || b[len(b)-1].GetCumulativeCount() != 2 {
		t.Errorf("run histogram buckets: %v", b)
	}
	// Scrapes within a second share one dead-letter count.
	before := reads
	gather(t, reg)
	if reads != before {
		t.Errorf("dead-letter count read again within its TTL (%d reads, was %d)", reads, before)
	}

	// Every exported name is documented in Names.
	known := map[string]bool{}
	for _, n := range metrics.Names() {
		known[n] = true
	}
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if !known[f.GetName()] {
			t.Errorf("%s is not in metrics.Names()", f.GetName())
		}
	}
}
