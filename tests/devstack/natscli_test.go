package devstack_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"

	"github.com/spoolq/spool/consumer"
	spool "github.com/spoolq/spool/shared"
	"github.com/spoolq/spool/shared/fleet"
	"github.com/spoolq/spool/streams/dlq"
	"github.com/spoolq/spool/streams/streamstest"
	"github.com/spoolq/spool/tests/devstack"
)

// TestNATSCLIEquivalents drives the dev stack with plain nats.go doing what
// the guides' `nats` commands do (the nats CLI itself cannot be built
// here):
//
//	nats pub spool.tasks.high.demo.echo '{...}' -H Spool-Task-Id:... -H Nats-Msg-Id:... -H Spool-Max-Retries:5
//	nats kv get spool_results <id>           (a direct get of $KV.spool_results.<id>)
//	nats stream view SPOOL_DLQ               (an ordered consumer from the first message)
//	nats micro ls / info / stats spool-consumer   ($SRV.PING, $SRV.INFO.…, $SRV.STATS.…)
//
// then replays the dead letter over HTTP and sees it run again from attempt 1.
func TestNATSCLIEquivalents(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	st, err := devstack.Start(ctx, devstack.Options{
		StoreDir:      t.TempDir(),
		Logger:        slog.New(slog.NewTextHandler(t.Output(), nil)),
		Worker:        true,
		WorkerOptions: []consumer.Option{consumer.WithRetry(20*time.Millisecond, 50*time.Millisecond, 3)},
		BrokerAddr:    "127.0.0.1:0",
		MetricsAddr:   "127.0.0.1:0",
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Stop)
	nc, err := nats.Connect(st.URL, nats.Name("nats-cli"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)

	// nats pub: a core publish with headers, no JetStream ack awaited.
	pub := func(subject, id, body string, hdr map[string]string) {
		t.Helper()
		m := nats.NewMsg(subject)
		m.Header.Set("Spool-Task-Id", id)
		m.Header.Set("Nats-Msg-Id", id)
		for k, v := range hdr {
			m.Header.Set(k, v)
		}
		m.Data = []byte(body)
		if err := nc.PublishMsg(m); err != nil {
			t.Fatal(err)
		}
		if err := nc.FlushWithContext(ctx); err != nil {
			t.Fatal(err)
		}
	}
	pub("spool.tasks.high.demo.echo", "welcome-ada", `{"to":"ada@example.com"}`, map[string]string{"Spool-Max-Retries": "5"})
	pub("spool.tasks.low.demo.fail", "doomed-1", `{"fail_times":1}`, map[string]string{"Spool-Max-Retries": "0"})

	// nats kv get spool_results welcome-ada: a direct get of the key's
	// last message on the bucket's stream.
	kvGet := func(key string) (spool.Result, error) {
		reply, err := nc.RequestWithContext(ctx, "$JS.API.DIRECT.GET.KV_spool_results.$KV.spool_results."+key, nil)
		if err != nil {
			return spool.Result{}, err
		}
		if s := reply.Header.Get("Status"); s != "" {
			return spool.Result{}, fmt.Errorf("direct get %s: status %s %s", key, s, reply.Header.Get("Description"))
		}
		var doc spool.Result
		if err := json.Unmarshal(reply.Data, &doc); err != nil {
			return doc, fmt.Errorf("result %s is not JSON: %w: %s", key, err, reply.Data)
		}
		return doc, nil
	}
	streamstest.WaitFor(t, 20*time.Second, func() error {
		doc, err := kvGet("welcome-ada")
		if err != nil {
			return err
		}
		if doc.State != spool.StateCompleted || string(doc.Result) != `{"to":"ada@example.com"}` || doc.Priority != spool.High {
			return fmt.Errorf("welcome-ada: %+v", doc)
		}
		return nil
	})

	// nats stream view SPOOL_DLQ: read the stream from the start with an
	// ordered consumer and look at each message's headers.
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	view := func() ([]jetstream.Msg, error) {
		oc, err := js.OrderedConsumer(ctx, "SPOOL_DLQ", jetstream.OrderedConsumerConfig{})
		if err != nil {
			return nil, err
		}
		batch, err := oc.FetchNoWait(100)
		if err != nil {
			return nil, err
		}
		var msgs []jetstream.Msg
		for m := range batch.Messages() {
			msgs = append(msgs, m)
		}
		return msgs, batch.Error()
	}
	var dead jetstream.Msg
	streamstest.WaitFor(t, 20*time.Second, func() error {
		msgs, err := view()
		if err != nil {
			return err
		}
		for _, m := range msgs {
			if m.Headers().Get("Spool-Task-Id") == "doomed-1" {
				dead = m
				return nil
			}
		}
		return fmt.Errorf("%d dead letters, none of doomed-1", len(msgs))
	})
	h := dead.Headers()
	if dead.Subject() != "spool.dlq.low.demo.fail" || h.Get("Spool-Reason") != "error" || h.Get("Spool-Attempts") != "1" ||
		h.Get("Spool-Original-Subject") != "spool.tasks.low.demo.fail" || h.Get("Spool-Error") == "" {
		t.Fatalf("dead letter %s %v", dead.Subject(), h)
	}
	// The dead result document follows the dead letter.
	streamstest.WaitFor(t, 10*time.Second, func() error {
		doc, err := kvGet("doomed-1")
		if err == nil && doc.State != spool.StateDead {
			err = fmt.Errorf("doomed-1 result %+v", doc)
		}
		return err
	})

	// nats micro ls / info / stats spool-consumer.
	var ping micro.Ping
	request(t, ctx, nc, "$SRV.PING", &ping)
	if ping.Name != fleet.ServiceName || ping.Type != micro.PingResponseType || ping.Metadata["worker"] != "spool-dev-worker" {
		t.Errorf("$SRV.PING: %+v", ping)
	}
	var info micro.Info
	request(t, ctx, nc, "$SRV.INFO."+fleet.ServiceName, &info)
	if info.Type != micro.InfoResponseType || info.ID != ping.ID || len(info.Endpoints) != 1 || info.Endpoints[0].Name != "stats" ||
		"http://"+info.Metadata["metrics_addr"]+"/metrics" != st.MetricsURL {
		t.Errorf("$SRV.INFO.spool-consumer: %+v", info)
	}
	// The worker's metrics, where the service says they are.
	var body string
	streamstest.WaitFor(t, 10*time.Second, func() error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, st.MetricsURL, nil)
		if err != nil {
			return err
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		body = string(b)
		if err != nil {
			return err
		}
		for _, want := range []string{`spool_tasks_completed_total{priority="high"} 1`, `spool_tasks_dead_total{priority="low"} 1`, "spool_dlq_messages 1"} {
			if !strings.Contains(body, want) {
				return fmt.Errorf("metrics lack %s", want)
			}
		}
		return nil
	})
	var raw []byte
	streamstest.WaitFor(t, 10*time.Second, func() error {
		var stats micro.Stats
		raw = request(t, ctx, nc, "$SRV.STATS."+fleet.ServiceName, &stats)
		var figures fleet.WorkerStats
		if len(stats.Endpoints) != 1 || json.Unmarshal(stats.Endpoints[0].Data, &figures) != nil {
			return fmt.Errorf("$SRV.STATS.spool-consumer: %s", raw)
		}
		if figures.Worker != "spool-dev-worker" || figures.Total.Completed != 1 || figures.Total.Dead != 1 ||
			figures.Types["demo.fail"].Dead != 1 || figures.Router == nil {
			return fmt.Errorf("stats data %+v", figures)
		}
		return nil
	})
	t.Logf("$SRV.STATS.spool-consumer:\n%s", raw)

	// Replay the dead letter over HTTP: it runs again from attempt 1, so
	// demo.fail (fail_times 1) fails and dies again, now carrying the
	// replay count.
	md, err := dead.Metadata()
	if err != nil {
		t.Fatal(err)
	}
	var rep dlq.Replayed
	url := st.BrokerURL + "/v1/dlq/" + strconv.FormatUint(md.Sequence.Stream, 10) + "/replay"
	if code := httpJSON(t, ctx, http.MethodPost, url, "", &rep); code != http.StatusOK || rep.TaskID != "doomed-1" || rep.Replays != 1 {
		t.Fatalf("replay: %d %+v", code, rep)
	}
	streamstest.WaitFor(t, 20*time.Second, func() error {
		msgs, err := view()
		if err != nil {
			return err
		}
		if len(msgs) != 1 {
			return fmt.Errorf("%d dead letters, want the replayed task dead again (and the original gone)", len(msgs))
		}
		h := msgs[0].Headers()
		if h.Get("Spool-Task-Id") != "doomed-1" || h.Get("Spool-Replays") != "1" || h.Get("Spool-Attempts") != "1" {
			return fmt.Errorf("dead again: %v", h)
		}
		return nil
	})
}

// request sends a core request, as the nats CLI does, decodes the first
// answer into v and returns it raw.
func request(t *testing.T, ctx context.Context, nc *nats.Conn, subject string, v any) []byte {
	t.Helper()
	reply, err := nc.RequestWithContext(ctx, subject, nil)
	if err != nil {
		t.Fatalf("%s: %v", subject, err)
	}
	if err := json.Unmarshal(reply.Data, v); err != nil {
		t.Fatalf("%s: %v: %s", subject, err, reply.Data)
	}
	return reply.Data
}
