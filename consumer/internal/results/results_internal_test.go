package results

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"

	spool "github.com/spoolq/spool/shared"
)

// The hand-written encoder writes exactly what json.Marshal writes, and
// leaves to json.Marshal what it does not handle.
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
		"result string":   {ID: "1", Type: "t", State: spool.StateCompleted, Result: spool.ResultValue([]byte("plain text"))},
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
		want, wantErr := json.Marshal(doc)
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

func FuzzEncodeResult(f *testing.F) {
	f.Add("id", "type.x", "boom", []byte(`{"a":1}`), int64(0), 3)
	f.Add("é", "<>", "\n", []byte(`x y`), int64(-1e18), -1)
	f.Fuzz(func(t *testing.T, id, typ, errText string, out []byte, ns int64, attempts int) {
		r := &Store{worker: "w"}
		at := time.Unix(0, ns).UTC()
		doc := spool.Result{ID: id, Type: typ, Priority: spool.Normal, State: spool.StateCompleted, Attempts: attempts,
			Result: spool.ResultValue(out), Error: errText, EnqueuedAt: at, FinishedAt: &at}
		got, err := r.encode(&doc)
		want, wantErr := json.Marshal(doc)
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
