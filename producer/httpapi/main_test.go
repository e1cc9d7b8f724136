package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"

	"github.com/spoolq/spool/producer"
	"github.com/spoolq/spool/producer/httpapi"
	spool "github.com/spoolq/spool/shared"
	"github.com/spoolq/spool/streams"
	"github.com/spoolq/spool/streams/embedded"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

type broker struct {
	url   string
	js    jetstream.JetStream
	tasks jetstream.Stream
	nc    *nats.Conn
}

func testLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug}))
}

func ctxFor(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// startBroker runs the broker through httptest against a provisioned
// embedded server.
func startBroker(t *testing.T, so embedded.Options, opts httpapi.Options) *broker {
	t.Helper()
	so.StoreDir = t.TempDir()
	s, err := embedded.Start(so)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	nc, err := nats.Connect(s.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	topo, err := streams.New(spool.DefaultNames(), streams.Settings{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxFor(t)
	if err := streams.Provision(ctx, js, topo, testLogger(t)); err != nil {
		t.Fatal(err)
	}
	tasks, err := js.Stream(ctx, "SPOOL_TASKS")
	if err != nil {
		t.Fatal(err)
	}
	client, err := producer.New(nc, producer.WithLogger(testLogger(t)))
	if err != nil {
		t.Fatal(err)
	}
	if opts.Logger == nil {
		opts.Logger = testLogger(t)
	}
	srv := httptest.NewServer(httpapi.NewHandler(client, opts))
	t.Cleanup(srv.Close)
	return &broker{url: srv.URL, js: js, tasks: tasks, nc: nc}
}

type response struct {
	status int
	header http.Header
	body   []byte
}

func (r response) errorCode() (code, field, existing string) {
	var e struct {
		Error struct {
			Code       string `json:"code"`
			Field      string `json:"field"`
			ExistingID string `json:"existing_id"`
		} `json:"error"`
	}
	_ = json.Unmarshal(r.body, &e) // a body that is not an error has no code
	return e.Error.Code, e.Error.Field, e.Error.ExistingID
}

func (b *broker) do(t testing.TB, method, path, token string, body []byte) response {
	t.Helper()
	req, err := http.NewRequestWithContext(ctxFor(t), method, b.url+path, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return response{status: resp.StatusCode, header: resp.Header, body: data}
}

func (b *broker) streamMsgs(t testing.TB) uint64 {
	t.Helper()
	info, err := b.tasks.Info(ctxFor(t))
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Msgs
}

func (b *broker) putResult(t testing.TB, r spool.Result) {
	t.Helper()
	ctx := ctxFor(t)
	kv, err := b.js.KeyValue(ctx, "spool_results")
	if err != nil {
		t.Fatal(err)
	}
	data, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, r.ID, data); err != nil {
		t.Fatal(err)
	}
}

func decode[T any](t testing.TB, r response) T {
	t.Helper()
	var v T
	if err := json.Unmarshal(r.body, &v); err != nil {
		t.Fatalf("decoding %s: %v", r.body, err)
	}
	return v
}

func newTestServer(t *testing.T, h http.Handler) string {
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv.URL
}
