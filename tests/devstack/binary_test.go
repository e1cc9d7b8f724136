package devstack_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/spoolq/spool/producer"
	spool "github.com/spoolq/spool/shared"
	"github.com/spoolq/spool/tests/devstack"
)

// A handler's output comes back byte for byte from every reader: the Go
// client, the broker's raw route and its JSON document, and a raw KV read
// decoded by the contract alone: all 256 byte values, invalid UTF-8, text,
// and JSON with spaces and HTML characters (kept verbatim).
func TestBinaryResultsEverywhere(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	st, err := devstack.Start(ctx, devstack.Options{
		StoreDir: t.TempDir(), Logger: slog.New(slog.NewTextHandler(t.Output(), nil)),
		Worker: true, BrokerAddr: "127.0.0.1:0",
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
	client, err := producer.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(ctx, "spool_results")
	if err != nil {
		t.Fatal(err)
	}

	all := make([]byte, 256)
	for i := range all {
		all[i] = byte(i)
	}
	cases := []struct {
		id, ctype, encoding string
		out                 []byte
	}{
		{"all-bytes", "application/octet-stream", "base64", all},
		{"invalid-utf8", "application/octet-stream", "base64", []byte("ok\xff\xfe\xc3(\x00end")},
		{"text", "text/plain; charset=utf-8", "text", []byte("plain <text> & more\n")},
		{"json", "application/json", "", []byte(`{"a": "<b>&",  "n": [1, 2]}`)},
	}
	for _, c := range cases {
		// demo.echo returns its payload: the output is c.out.
		if _, err := client.Enqueue(ctx, producer.Task{Type: "demo.echo", ID: c.id, Payload: c.out}); err != nil {
			t.Fatal(err)
		}
		res, err := client.Wait(ctx, c.id)
		if err != nil {
			t.Fatal(err)
		}
		// 1. The Go client.
		if out, err := res.Output(); err != nil || !bytes.Equal(out, c.out) || res.ResultEncoding != c.encoding {
			t.Errorf("%s: Go client %q (%q), %v", c.id, out, res.ResultEncoding, err)
		}
		// 2. The broker's raw route.
		resp, err := http.Get(st.BrokerURL + "/v1/tasks/" + c.id + "/result")
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != 200 || !bytes.Equal(body, c.out) || resp.Header.Get("Content-Type") != c.ctype {
			t.Errorf("%s: broker raw %d %q %q, %v", c.id, resp.StatusCode, resp.Header.Get("Content-Type"), body, err)
		}
		// 3. The broker's JSON document, read with the contract alone.
		var doc map[string]json.RawMessage
		if code := httpJSON(t, ctx, http.MethodGet, st.BrokerURL+"/v1/tasks/"+c.id, "", &doc); code != 200 {
			t.Fatalf("%s: GET %d", c.id, code)
		}
		if c.encoding != "" {
			if got := contractOutput(t, doc); !bytes.Equal(got, c.out) {
				t.Errorf("%s: broker document %q", c.id, got)
			}
		}
		// 4. A raw KV read: the stored document, by the contract.
		e, err := kv.Get(ctx, c.id)
		if err != nil {
			t.Fatal(err)
		}
		if c.encoding == "" {
			// JSON output is in the document verbatim.
			if !bytes.Contains(e.Value(), append([]byte(`"result":`), c.out...)) {
				t.Errorf("%s: stored document %s lacks the output verbatim", c.id, e.Value())
			}
			continue
		}
		var stored map[string]json.RawMessage
		if err := json.Unmarshal(e.Value(), &stored); err != nil {
			t.Fatal(err)
		}
		if got := contractOutput(t, stored); !bytes.Equal(got, c.out) {
			t.Errorf("%s: raw KV read %q", c.id, got)
		}
	}
}

// contractOutput decodes a text or base64 result as docs/contract.md says.
func contractOutput(t *testing.T, doc map[string]json.RawMessage) []byte {
	t.Helper()
	var enc, str string
	if err := json.Unmarshal(doc["result_encoding"], &enc); err != nil {
		t.Fatalf("result_encoding %s: %v", doc["result_encoding"], err)
	}
	if err := json.Unmarshal(doc["result"], &str); err != nil {
		t.Fatal(err)
	}
	switch enc {
	case spool.ResultEncodingText:
		return []byte(str)
	case spool.ResultEncodingBase64:
	default:
		t.Fatalf("result_encoding %q", enc)
	}
	out, err := base64.StdEncoding.DecodeString(str)
	if err != nil {
		t.Fatal(err)
	}
	return out
}
