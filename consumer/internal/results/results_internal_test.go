package results

import (
	"bytes"
	"encoding/json"
	"strconv"
	"testing"
	"time"

	spool "github.com/spoolq/spool/shared"
)

// The hand-written encoder writes exactly what json.Marshal writes, but for
// the result, which it writes verbatim (json.Marshal compacts it), and
// leaves to json.Marshal the errors.
func TestEncodeMatchesJSONMarshal(t *testing.T) {
	t.Parallel()
	r := &Store{worker: "host-1"}
	at := time.Date(2026, 11, 22, 1, 2, 3, 456789000, time.UTC)
	zoned := time.Date(2026, 1, 2, 3, 4, 5, 0, time.FixedZone("x", 5*3600+30*60))
	ptr := func(t time.Time) *time.Time { return &t }
	full := spool.Result{
		ID: "01JABC", Type: "email.send", Priority: spool.High, State: spool.StateRetrying, Attempts: 3,
		Result: json.RawMessage(`{"ok":true,"n":[1,2]}`), Error: "boom: it failed", Reason: spool.ReasonTimeout,
		NextAttempt: ptr(at.Add(time.Second)), EnqueuedAt: at, StartedAt: ptr(zoned), FinishedAt: ptr(at),
		Worker: "w-1", TraceParent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", Replays: 2, ReplayedAt: ptr(at),
	}
	cases := map[string]spool.Result{
		"full":            full,
		"minimal":         {ID: "1", Type: "t", State: spool.StateCompleted},
		"zero time":       {ID: "1", Type: "t", State: spool.StateProcessing, StartedAt: &time.Time{}},
		"result text":     withOutput(spool.Result{ID: "1", Type: "t", State: spool.StateCompleted}, []byte("plain text")),
		"result bytes":    withOutput(spool.Result{ID: "1", Type: "t", State: spool.StateCompleted}, []byte{0, 0xff, 0xfe, '\n'}),
		"result spaces":   {ID: "1", Type: "t", State: spool.StateCompleted, Result: json.RawMessage(`{"a": 1,  "b" : [ 2 ]}`)},
		"result html":     {ID: "1", Type: "t", State: spool.StateCompleted, Result: json.RawMessage(`"<b>&"`)},
		"result unicode":  {ID: "1", Type: "t", State: spool.StateCompleted, Result: json.RawMessage(`"héllo\u2028"`)},
		"error escapes":   {ID: "1", Type: "t", State: spool.StateDead, Error: "line\nbreak \"quoted\" \\ <tag> & é"},
		"error control":   {ID: "1", Type: "t", State: spool.StateDead, Error: "\x00\x1f\x7f"},
		"worker unicode":  {ID: "1", Type: "t", State: spool.StateDead, Worker: "hôte-1"},
		"year 10000":      {ID: "1", Type: "t", State: spool.StateDead, EnqueuedAt: time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)},
		"negative counts": {ID: "1", Type: "t", State: spool.StateDead, Attempts: -1, Replays: -2},
	}
	for _, p := range spool.Priorities {
		d := full
		d.Priority = p
		cases["priority "+p.String()] = d
	}
	for name, doc := range cases {
		got, err := r.encode(&doc)
		want, wantErr := marshalVerbatim(doc)
		if (err != nil) != (wantErr != nil) {
			t.Errorf("%s: error %v, json.Marshal's %v", name, err, wantErr)
			continue
		}
		if err == nil && !bytes.Equal(got, want) {
			t.Errorf("%s:\n got %s\nwant %s", name, got, want)
		}
	}
	bad := spool.Result{ID: "1", Priority: spool.Priority(42)}
	if _, err := r.encode(&bad); err == nil {
		t.Error("an invalid priority encoded")
	}
}

func withOutput(doc spool.Result, out []byte) spool.Result {
	doc.Result, doc.ResultEncoding = spool.ResultValue(out)
	return doc
}

// marshalVerbatim is json.Marshal of doc with doc.Result written as it is:
// what the worker stores.
func marshalVerbatim(doc spool.Result) ([]byte, error) {
	raw, enc := doc.Result, doc.ResultEncoding
	doc.Result, doc.ResultEncoding = nil, ""
	b, err := json.Marshal(doc)
	if err != nil || len(raw) == 0 {
		return b, err
	}
	at := []byte(`,"attempts":` + strconv.Itoa(doc.Attempts))
	i := bytes.Index(b, at) + len(at)
	ins := append([]byte(`,"result":`), raw...)
	if enc != "" {
		ins = append(ins, `,"result_encoding":"`+enc+`"`...)
	}
	return append(b[:i:i], append(ins, b[i:]...)...), nil
}

// The stored document gives back the handler's bytes: all 256 byte
// values, invalid UTF-8, JSON with spaces and HTML characters.
func TestEncodeKeepsOutput(t *testing.T) {
	t.Parallel()
	r := &Store{worker: "w"}
	all := make([]byte, 256)
	for i := range all {
		all[i] = byte(i)
	}
	for _, out := range [][]byte{all, []byte("\xff\xfe"), []byte(`{"a": "<b>&", "n": [1, 2]}`), []byte("text\n")} {
		doc := withOutput(spool.Result{ID: "1", Type: "t", Priority: spool.Normal, State: spool.StateCompleted}, out)
		b, err := r.encode(&doc)
		if err != nil {
			t.Fatal(err)
		}
		var back spool.Result
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatalf("%q: %v", b, err)
		}
		if got, err := back.Output(); err != nil || !bytes.Equal(got, out) {
			t.Errorf("output %q came back as %q, %v", out, got, err)
		}
	}
}

func FuzzEncodeResult(f *testing.F) {
	f.Add("id", "type.x", "boom", []byte(`{"a":1}`), int64(0), 3)
	f.Add("é", "<>", "\n", []byte(`x y`), int64(-1e18), -1)
	f.Fuzz(func(t *testing.T, id, typ, errText string, out []byte, ns int64, attempts int) {
		r := &Store{worker: "w"}
		at := time.Unix(0, ns).UTC()
		doc := withOutput(spool.Result{ID: id, Type: typ, Priority: spool.Normal, State: spool.StateCompleted, Attempts: attempts,
			Error: errText, EnqueuedAt: at, FinishedAt: &at}, out)
		got, err := r.encode(&doc)
		want, wantErr := marshalVerbatim(doc)
		if (err != nil) != (wantErr != nil) {
			t.Fatalf("error %v, json.Marshal's %v", err, wantErr)
		}
		if err == nil && !bytes.Equal(got, want) {
			t.Fatalf("got %s want %s", got, want)
		}
	})
}

// BenchmarkEncodeResult compares the hand-written encoder with
// encoding/json per result document: a completed task without output, and
// one with a small JSON output and a trace context.
func BenchmarkEncodeResult(b *testing.B) {
	r := &Store{worker: "host-1234"}
	at := time.Now()
	docs := map[string]spool.Result{
		"completed": {ID: "01JABCDEFGHJKMNPQRSTVWXYZ0", Type: "bench", Priority: spool.Normal, State: spool.StateCompleted,
			Attempts: 1, EnqueuedAt: at, StartedAt: &at, FinishedAt: &at},
		"with_output": {ID: "01JABCDEFGHJKMNPQRSTVWXYZ0", Type: "email.send", Priority: spool.High, State: spool.StateCompleted,
			Attempts: 2, Result: json.RawMessage(`{"ok":true,"id":"m-123","n":[1,2,3]}`), EnqueuedAt: at, StartedAt: &at, FinishedAt: &at,
			TraceParent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"},
	}
	for name, doc := range docs {
		b.Run(name+"/append", func(b *testing.B) {
			for b.Loop() {
				if _, err := r.encode(&doc); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(name+"/json.Marshal", func(b *testing.B) {
			for b.Loop() {
				if _, err := json.Marshal(doc); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
