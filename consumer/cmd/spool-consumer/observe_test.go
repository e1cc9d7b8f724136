package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/spoolq/spool/consumer"
	spool "github.com/spoolq/spool/shared"
	"github.com/spoolq/spool/shared/fleet"
	"github.com/spoolq/spool/streams"
	"github.com/spoolq/spool/streams/streamstest"
)

// collect sends a request on subject and gathers answers until want have
// come or the wait ends.
func collect(t *testing.T, nc *nats.Conn, subject string, want int, wait time.Duration) []*nats.Msg {
	t.Helper()
	inbox := nc.NewRespInbox()
	sub, err := nc.SubscribeSync(inbox)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := nc.PublishRequest(subject, inbox, nil); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), wait)
	defer cancel()
	var msgs []*nats.Msg
	for len(msgs) < want {
		m, err := sub.NextMsgWithContext(ctx)
		if err != nil {
			break
		}
		msgs = append(msgs, m)
	}
	return msgs
}

func httpGet(url string) (int, string, error) {
	resp, err := http.Get(url)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// Two consumer processes start side by side on one host (the metrics port
// defaults to a free one), answer the NATS service API as `nats micro
// ls/info/stats` ask it, and serve /metrics, /healthz and /readyz.
func TestRunServesMetricsHealthAndService(t *testing.T) {
	env := streamstest.Start(t, streams.Settings{})
	ctx := streamstest.Context(t)
	t.Setenv("SPOOL_NATS_URL", env.URL)
	t.Setenv("SPOOL_STATS_INTERVAL", "0")
	t.Setenv("SPOOL_LOG_LEVEL", "debug")

	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	done := make(chan error, 2)
	var logs [2]syncBuffer
	for i := range 2 {
		go func() { done <- run(runCtx, []string{"--demo"}, io.Discard, io.MultiWriter(&logs[i], t.Output())) }()
	}
	nc := env.NC

	// nats micro ls: $SRV.PING answers from both.
	var infos []micro.Info
	streamstest.WaitFor(t, 15*time.Second, func() error {
		infos = infos[:0]
		for _, m := range collect(t, nc, "$SRV.INFO."+fleet.ServiceName, 2, time.Second) {
			var info micro.Info
			if err := json.Unmarshal(m.Data, &info); err != nil {
				return err
			}
			infos = append(infos, info)
		}
		if len(infos) != 2 {
			return fmt.Errorf("%d instances answer $SRV.INFO", len(infos))
		}
		return nil
	})
	if pings := collect(t, nc, "$SRV.PING", 2, 2*time.Second); len(pings) != 2 {
		t.Errorf("$SRV.PING: %d answers, want 2", len(pings))
	}
	addrs := map[string]bool{}
	for _, info := range infos {
		addr := info.Metadata["metrics_addr"]
		if info.Name != "spool-consumer" || !strings.HasPrefix(addr, "127.0.0.1:") || info.Metadata["worker"] == "" ||
			info.Metadata["prefix"] != "spool" || len(info.Endpoints) != 1 || info.Endpoints[0].Name != "stats" {
			t.Errorf("info %+v", info)
		}
		addrs[addr] = true
	}
	if len(addrs) != 2 {
		t.Fatalf("metrics addresses %v: want two different ones", addrs)
	}

	m := nats.NewMsg("spool.tasks.high.demo.echo")
	m.Header.Set(spool.HeaderTaskID, "obs-1")
	m.Data = []byte(`{"hello":"metrics"}`)
	if _, err := env.JS.PublishMsg(ctx, m); err != nil {
		t.Fatal(err)
	}

	// nats micro stats spool-consumer: the live figures in each endpoint's data.
	var statsJSON []byte
	streamstest.WaitFor(t, 15*time.Second, func() error {
		var completed uint64
		for _, m := range collect(t, nc, "$SRV.STATS."+fleet.ServiceName, 2, time.Second) {
			var st micro.Stats
			if err := json.Unmarshal(m.Data, &st); err != nil {
				return err
			}
			if len(st.Endpoints) != 1 {
				return fmt.Errorf("stats endpoints %+v", st.Endpoints)
			}
			var figures fleet.WorkerStats
			if err := json.Unmarshal(st.Endpoints[0].Data, &figures); err != nil {
				return fmt.Errorf("stats data %s: %w", st.Endpoints[0].Data, err)
			}
			completed += figures.Total.Completed
			if figures.Total.Completed > 0 {
				statsJSON = m.Data
			}
		}
		if completed != 1 {
			return fmt.Errorf("fleet completed %d tasks, want 1", completed)
		}
		return nil
	})
	t.Logf("$SRV.STATS.spool-consumer answer:\n%s", statsJSON)

	// The stats endpoint itself answers a plain request.
	var st micro.Stats
	if err := json.Unmarshal(statsJSON, &st); err != nil {
		t.Fatal(err)
	}
	reply, err := nc.Request(st.Endpoints[0].Subject, nil, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var direct fleet.WorkerStats
	if err := json.Unmarshal(reply.Data, &direct); err != nil || direct.Total.Completed != 1 || len(direct.Priorities) != 5 {
		t.Errorf("stats endpoint %s: %s (%v)", st.Endpoints[0].Subject, reply.Data, err)
	}

	for addr := range addrs {
		for _, path := range []string{"/healthz", "/readyz"} {
			code, body, err := httpGet("http://" + addr + path)
			if err != nil || code != 200 {
				t.Errorf("GET %s%s: %d %s %v", addr, path, code, body, err)
			}
		}
		code, body, err := httpGet("http://" + addr + "/metrics")
		if err != nil || code != 200 {
			t.Fatalf("GET %s/metrics: %d %v", addr, code, err)
		}
		for _, want := range []string{"spool_tasks_processed_total{priority=\"high\"}", "spool_pickup_seconds_bucket",
			"spool_dlq_messages 0", "spool_slots{state=\"idle\"}", "spool_dlq_router_routed_total", "go_goroutines"} {
			if !strings.Contains(body, want) {
				t.Errorf("%s/metrics lacks %s", addr, want)
			}
		}
	}

	stop() // SIGTERM
	for range 2 {
		if err := <-done; err != nil {
			t.Fatalf("run: %v", err)
		}
	}
	if pings := collect(t, nc, "$SRV.PING."+fleet.ServiceName, 1, 200*time.Millisecond); len(pings) != 0 {
		t.Errorf("%d instances still answer after stopping", len(pings))
	}
	for addr := range addrs {
		if _, _, err := httpGet("http://" + addr + "/healthz"); err == nil {
			t.Errorf("%s still serves after stopping", addr)
		}
	}
}

func TestMetricsAddrIsValidated(t *testing.T) {
	t.Setenv("SPOOL_METRICS_ADDR", "9090")
	err := run(t.Context(), nil, io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "SPOOL_METRICS_ADDR") {
		t.Fatalf("err %v, want one naming SPOOL_METRICS_ADDR", err)
	}
}

// /readyz is 503 until the worker pulls and again once it stops; /healthz
// is 200 until the worker has stopped.
func TestHealthFollowsTheWorker(t *testing.T) {
	t.Parallel()
	env := streamstest.Start(t, streams.Settings{})
	ctx := streamstest.Context(t)
	nc := env.Connect(t)
	w, err := consumer.New(nc, consumer.NewMux(), consumer.WithLogger(streamstest.Logger(t)))
	if err != nil {
		t.Fatal(err)
	}
	obs, err := startObserver(ctx, "127.0.0.1:0", w, nc, streamstest.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := obs.stop(context.WithoutCancel(ctx)); err != nil {
			t.Error(err)
		}
	})
	expect := func(path string, want int) {
		t.Helper()
		code, body, err := httpGet("http://" + obs.addr + path)
		if err != nil || code != want {
			t.Errorf("GET %s: %d %s %v, want %d", path, code, body, err, want)
		}
	}
	expect("/healthz", 200)
	expect("/readyz", 503) // not started
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	expect("/healthz", 200)
	expect("/readyz", 200)
	if err := w.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	expect("/healthz", 503)
	expect("/readyz", 503)
	expect("/nope", 404)
}
