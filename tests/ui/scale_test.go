package ui_test

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	spool "github.com/spoolq/spool/shared"
	"github.com/spoolq/spool/streams"
	"github.com/spoolq/spool/tests/devstack"
)

// publishRaw publishes n messages made by msg, with at most 2,000 awaiting
// their acknowledgement.
func publishRaw(t *testing.T, ctx context.Context, js jetstream.JetStream, n int, msg func(i int) *nats.Msg) {
	t.Helper()
	for i := range n {
		if _, err := js.PublishMsgAsync(msg(i)); err != nil {
			t.Fatal(err)
		}
		if (i+1)%2000 != 0 && i != n-1 {
			continue
		}
		select {
		case <-js.PublishAsyncComplete():
		case <-ctx.Done():
			t.Fatal("publishing: ", ctx.Err())
		}
	}
}

// TestDashboardAtScale loads the page over a queue no worker drains
// (20,000 tasks: the overview's cost does not depend on it, see
// producer/httpapi's TestOverviewAtScale for 1,000,000) and 10,000 dead
// letters: the figures are right, the dead-letter list
// holds one page of 50 and pages on by sequence, and the overview requests
// stay quick.
func TestDashboardAtScale(t *testing.T) {
	const queued, dead = 20_000, 10_000
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()
	st, err := devstack.Start(ctx, devstack.Options{
		StoreDir:   t.TempDir(),
		Logger:     slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn})),
		BrokerAddr: "127.0.0.1:0",
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Stop)
	nc, err := nats.Connect(st.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(4096))
	if err != nil {
		t.Fatal(err)
	}
	// The type consumer a worker serving scale.task makes: the tasks are
	// counted on it, as the queue of a service whose workers are away
	// (tasks of a type no worker ever served are in unserved_test.go).
	tasks, err := js.Stream(ctx, "SPOOL_TASKS")
	if err != nil {
		t.Fatal(err)
	}
	cfg := streams.TypeConsumerConfig(spool.DefaultNames(), tasks.CachedInfo().Config, spool.Normal, "scale.task")
	if _, err := tasks.CreateConsumer(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	publishRaw(t, ctx, js, queued, func(int) *nats.Msg {
		return &nats.Msg{Subject: "spool.tasks.normal.scale.task", Data: []byte(`{}`)}
	})
	publishRaw(t, ctx, js, dead, func(i int) *nats.Msg {
		m := nats.NewMsg("spool.dlq.low.scale.dead")
		m.Header.Set("Spool-Task-Id", "dead-"+strconv.Itoa(i))
		m.Header.Set("Spool-Reason", "permanent")
		m.Header.Set("Spool-Error", "scale test "+strconv.Itoa(i))
		m.Header.Set("Spool-Attempts", "1")
		m.Header.Set("Spool-Original-Subject", "spool.tasks.low.scale.dead")
		m.Data = []byte(`{"n":` + strconv.Itoa(i) + `}`)
		return m
	})

	b := startBrowser(t)
	b.do("loading /ui/", 15*time.Second, chromedp.Navigate(st.BrokerURL+"/ui/"))
	b.waitJS("the queued tasks", `document.querySelector("#prio-normal .pending").textContent === "20,000" && document.querySelector("#dead-letters").textContent === "10,000"`, 10*time.Second)
	b.waitJS("one page of dead letters", `document.querySelectorAll("#dlq-list tbody tr").length === 50 && !document.querySelector("#dlq-next").disabled`, 10*time.Second)
	first := eval[[]string](b, `[...document.querySelectorAll("#dlq-list tbody tr")].map(r => r.dataset.seq)`)
	b.do("the next page", 10*time.Second, press("#dlq-next"))
	b.waitJS("the second page", fmt.Sprintf(`document.querySelector("#dlq-list tbody tr")?.dataset.seq === "%d" && document.querySelectorAll("#dlq-list tbody tr").length === 50`, mustAtoi(t, first[49])+1), 10*time.Second)
	// A few more refreshes, then the overview requests' timings.
	b.waitJS("five overview refreshes", `performance.getEntriesByType("resource").filter(e => e.name.endsWith("/v1/overview")).length >= 5`, 15*time.Second)
	slowest := eval[float64](b, `Math.max(...performance.getEntriesByType("resource").filter(e => e.name.endsWith("/v1/overview")).map(e => e.duration))`)
	t.Logf("slowest overview request with %d queued and %d dead letters: %.1f ms", queued, dead, slowest)
	if slowest > 1000 {
		t.Errorf("an overview request took %.0f ms", slowest)
	}
	t.Logf("screenshot: %s", b.screenshot("ui-dashboard-scale.png"))
}

func mustAtoi(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatalf("%q: %v", s, err)
	}
	return n
}
