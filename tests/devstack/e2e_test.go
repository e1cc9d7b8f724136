package devstack_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/spoolq/spool/consumer"
	spool "github.com/spoolq/spool/shared"
	"github.com/spoolq/spool/streams/streamstest"
	"github.com/spoolq/spool/tests/devstack"
)

// TestDevStackEndToEnd drives the stack `make run` starts: a task enqueued
// over HTTP completes with its result, a raw NATS task completes with its
// result in KV, and a failing task lands in the DLQ with its reason.
func TestDevStackEndToEnd(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	st, err := devstack.Start(ctx, devstack.Options{
		StoreDir:      t.TempDir(),
		Logger:        slog.New(slog.NewTextHandler(t.Output(), nil)),
		Worker:        true,
		WorkerOptions: []consumer.Option{consumer.WithRetry(20*time.Millisecond, 100*time.Millisecond, 3)},
		BrokerAddr:    "127.0.0.1:0",
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Stop)

	// 1. Over HTTP: enqueue demo.echo, long-poll its result.
	var enq struct {
		ID string `json:"id"`
	}
	status := httpJSON(t, ctx, http.MethodPost, st.BrokerURL+"/v1/tasks",
		`{"type":"demo.echo","priority":"high","payload":{"hello":"world"}}`, &enq)
	if status != http.StatusCreated || enq.ID == "" {
		t.Fatalf("POST /v1/tasks: status %d, id %q", status, enq.ID)
	}
	var res spool.Result
	streamstest.WaitFor(t, 20*time.Second, func() error {
		if code := httpJSON(t, ctx, http.MethodGet, st.BrokerURL+"/v1/tasks/"+enq.ID+"?wait=2s", "", &res); code != http.StatusOK {
			return fmt.Errorf("GET status %d", code)
		}
		if res.State != spool.StateCompleted {
			return fmt.Errorf("state %s", res.State)
		}
		return nil
	})
	if string(res.Result) != `{"hello":"world"}` || res.Attempts != 1 || res.Priority != spool.High {
		t.Fatalf("HTTP task result %+v", res)
	}

	// 2. Raw NATS, no Spool code: publish with headers, read the result from KV.
	nc, err := nats.Connect(st.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	msg := nats.NewMsg("spool.tasks.normal.demo.echo")
	msg.Header.Set("Spool-Task-Id", "raw-1")
	msg.Data = []byte("plain text")
	if _, err := js.PublishMsg(ctx, msg); err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(ctx, "spool_results")
	if err != nil {
		t.Fatal(err)
	}
	streamstest.WaitFor(t, 20*time.Second, func() error {
		e, err := kv.Get(ctx, "raw-1")
		if err != nil {
			return err
		}
		if err := json.Unmarshal(e.Value(), &res); err != nil {
			return err
		}
		if res.State != spool.StateCompleted {
			return fmt.Errorf("state %s", res.State)
		}
		return nil
	})
	if out, err := res.Output(); err != nil || string(out) != "plain text" || res.ResultEncoding != spool.ResultEncodingText || string(res.Result) != `"plain text"` {
		t.Fatalf("raw task result %s (%s): %q, %v", res.Result, res.ResultEncoding, out, err)
	}

	// 3. A task that keeps failing ends in the DLQ with reason "error".
	msg = nats.NewMsg("spool.tasks.low.demo.fail")
	msg.Header.Set("Spool-Task-Id", "fails-1")
	msg.Header.Set("Spool-Max-Retries", "1")
	msg.Data = []byte(`{"fail_times":5}`)
	if _, err := js.PublishMsg(ctx, msg); err != nil {
		t.Fatal(err)
	}
	dlq, err := js.Stream(ctx, "SPOOL_DLQ")
	if err != nil {
		t.Fatal(err)
	}
	var dead *jetstream.RawStreamMsg
	streamstest.WaitFor(t, 20*time.Second, func() error {
		dead, err = dlq.GetLastMsgForSubject(ctx, "spool.dlq.low.demo.fail")
		return err
	})
	if got := dead.Header.Get("Spool-Reason"); got != "error" {
		t.Errorf("Spool-Reason %q, want error", got)
	}
	if got := dead.Header.Get("Spool-Attempts"); got != "2" {
		t.Errorf("Spool-Attempts %q, want 2", got)
	}
	if got := dead.Header.Get("Spool-Task-Id"); got != "fails-1" {
		t.Errorf("Spool-Task-Id %q, want fails-1", got)
	}
	streamstest.WaitFor(t, 10*time.Second, func() error {
		e, err := kv.Get(ctx, "fails-1")
		if err != nil {
			return err
		}
		if err := json.Unmarshal(e.Value(), &res); err != nil {
			return err
		}
		if res.State != spool.StateDead {
			return fmt.Errorf("state %s", res.State)
		}
		return nil
	})
}

// TestDevStackBrokerToken checks the broker refuses requests without its token.
func TestDevStackBrokerToken(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	st, err := devstack.Start(ctx, devstack.Options{
		StoreDir:    t.TempDir(),
		Logger:      slog.New(slog.NewTextHandler(t.Output(), nil)),
		BrokerAddr:  "127.0.0.1:0",
		BrokerToken: "a-token-of-sixteen-chars",
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Stop)
	var body map[string]any
	if code := httpJSON(t, ctx, http.MethodPost, st.BrokerURL+"/v1/tasks", `{"type":"demo.echo"}`, &body); code != http.StatusUnauthorized {
		t.Fatalf("no token: status %d, want 401", code)
	}
}

func httpJSON(t *testing.T, ctx context.Context, method, url, body string, out any) int {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, out); err != nil && !errors.Is(err, io.EOF) {
		t.Fatalf("%s %s: status %d, body %q: %v", method, url, resp.StatusCode, b, err)
	}
	return resp.StatusCode
}
