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

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"

	"github.com/spoolq/spool/producer"
	"github.com/spoolq/spool/producer/httpapi"
	spool "github.com/spoolq/spool/shared"
	"github.com/spoolq/spool/streams"
	"github.com/spoolq/spool/streams/admin"
	"github.com/spoolq/spool/streams/embedded"
	"github.com/spoolq/spool/streams/streamstest"
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

func testLogger(t testing.TB) *slog.Logger { return streamstest.Logger(t) }

func ctxFor(t testing.TB) context.Context { return streamstest.Context(t) }

// startBroker runs the broker through httptest against a provisioned
// embedded server.
func startBroker(t *testing.T, so embedded.Options, opts httpapi.Options) *broker {
	t.Helper()
	return startBrokerWith(t, so, streams.Settings{}, opts)
}

// startBrokerWith is startBroker on a topology provisioned with settings.
func startBrokerWith(t *testing.T, so embedded.Options, settings streams.Settings, opts httpapi.Options) *broker {
	t.Helper()
	e := streamstest.StartWith(t, so, settings)
	nc, js := e.NC, e.JS
	tasks := e.Stream(t, e.Names.TaskStream())
	client, err := producer.New(nc, producer.WithLogger(testLogger(t)))
	if err != nil {
		t.Fatal(err)
	}
	if opts.Logger == nil {
		opts.Logger = testLogger(t)
	}
	adm, err := admin.New(nc, admin.WithLogger(testLogger(t)))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(httpapi.NewHandler(client, adm, opts))
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
