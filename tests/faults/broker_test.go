package faults_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/spoolq/spool/producer"
	"github.com/spoolq/spool/producer/httpapi"
	spool "github.com/spoolq/spool/shared"
	"github.com/spoolq/spool/streams/admin"
)

// electionBroker is the HTTP broker's handler on a connection of its own.
type electionBroker struct{ url string }

func newElectionBroker(t testing.TB, url string, nc *nats.Conn) *electionBroker {
	t.Helper()
	client, err := producer.New(connect(t, url, "faults-election-broker"), producer.WithTimeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(client.Close)
	adm, err := admin.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(httpapi.NewHandler(client, adm, httpapi.Options{Logger: testLogger(t, slog.LevelWarn)}))
	t.Cleanup(srv.Close)
	return &electionBroker{url: srv.URL}
}

// wait long-polls GET /v1/tasks/{id}?wait=10s until the task's document is
// terminal, as an HTTP client does: an answer with a document not final
// yet, or the documented 404 of a task not picked up when the poll ends,
// polls again; any other answer is the error.
func (b *electionBroker) wait(ctx context.Context, id string) (spool.Result, error) {
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, b.url+"/v1/tasks/"+id+"?wait=10s", nil)
		if err != nil {
			return spool.Result{}, err
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return spool.Result{}, err
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			return spool.Result{}, err
		}
		switch resp.StatusCode {
		case http.StatusOK:
			var r spool.Result
			if err := json.Unmarshal(body, &r); err != nil {
				return r, fmt.Errorf("decoding %s: %w", body, err)
			}
			if r.State.Terminal() {
				return r, nil
			}
		case http.StatusNotFound:
		default:
			return spool.Result{}, fmt.Errorf("HTTP %d: %s", resp.StatusCode, bytes.TrimSpace(body))
		}
	}
}
