package spool_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	spool "github.com/spoolq/spool/shared"
)

func TestParsePriority(t *testing.T) {
	t.Parallel()
	for i, name := range []string{"critical", "high", "normal", "low", "idle"} {
		p, err := spool.ParsePriority(name)
		if err != nil || p != spool.Priorities[i] || p.String() != name {
			t.Errorf("ParsePriority(%q) = %v, %v", name, p, err)
		}
	}
	for _, bad := range []string{"", "High", "urgent", "critical ", "0"} {
		if _, err := spool.ParsePriority(bad); !errors.Is(err, spool.ErrInvalidPriority) {
			t.Errorf("ParsePriority(%q): want ErrInvalidPriority, got %v", bad, err)
		}
	}
	if !slices.IsSorted(spool.Priorities[:]) || spool.Critical >= spool.Idle {
		t.Error("priorities must be ordered most urgent first")
	}
	if spool.Priority(7).Valid() || spool.Priority(-1).Valid() {
		t.Error("out-of-range priorities must be invalid")
	}
}

func TestPriorityText(t *testing.T) {
	t.Parallel()
	var p spool.Priority
	if err := p.UnmarshalText([]byte("low")); err != nil || p != spool.Low {
		t.Fatalf("UnmarshalText(low) = %v, %v", p, err)
	}
	b, err := spool.High.MarshalText()
	if err != nil || string(b) != "high" {
		t.Fatalf("MarshalText(High) = %q, %v", b, err)
	}
	if _, err := spool.Priority(9).MarshalText(); !errors.Is(err, spool.ErrInvalidPriority) {
		t.Fatalf("MarshalText(9): want ErrInvalidPriority, got %v", err)
	}
}

func TestValidateType(t *testing.T) {
	t.Parallel()
	tests := []struct {
		typ     string
		wantErr bool
	}{
		{"email", false},
		{"email.send", false},
		{"a-b_c.D9", false},
		{"", true},
		{".email", true},
		{"email.", true},
		{"email..send", true},
		{"email send", true},
		{"email.*", true},
		{"email.>", true},
		{"é", true},
		{strings.Repeat("a", spool.MaxTypeLen), false},
		{strings.Repeat("a", spool.MaxTypeLen+1), true},
	}
	for _, tt := range tests {
		err := spool.ValidateType(tt.typ)
		if (err != nil) != tt.wantErr {
			t.Errorf("ValidateType(%q) = %v, wantErr %v", tt.typ, err, tt.wantErr)
		}
		if err != nil && !errors.Is(err, spool.ErrInvalidType) {
			t.Errorf("ValidateType(%q) error %v is not ErrInvalidType", tt.typ, err)
		}
	}
}

func TestValidateID(t *testing.T) {
	t.Parallel()
	tests := []struct {
		id      string
		wantErr bool
	}{
		{"01J9ZQ", false},
		{"order-42_x=", false},
		{"12345", false},
		{"", true},
		{"a.b", true},
		{"a/b", true},
		{"a b", true},
		{"a*", true},
		{strings.Repeat("x", spool.MaxIDLen), false},
		{strings.Repeat("x", spool.MaxIDLen+1), true},
	}
	for _, tt := range tests {
		err := spool.ValidateID(tt.id)
		if (err != nil) != tt.wantErr {
			t.Errorf("ValidateID(%q) = %v, wantErr %v", tt.id, err, tt.wantErr)
		}
		if err != nil && !errors.Is(err, spool.ErrInvalidID) {
			t.Errorf("ValidateID(%q) error %v is not ErrInvalidID", tt.id, err)
		}
	}
}

func TestNewIDIsValidUniqueAndOrdered(t *testing.T) {
	t.Parallel()
	seen := map[string]bool{}
	prev := ""
	for range 10_000 {
		id := spool.NewID()
		if err := spool.ValidateID(id); err != nil {
			t.Fatalf("NewID() = %q: %v", id, err)
		}
		if len(id) != 26 {
			t.Fatalf("NewID() = %q, want 26 characters", id)
		}
		if seen[id] {
			t.Fatalf("NewID() repeated %q", id)
		}
		seen[id] = true
		// The first 10 characters encode the millisecond: never decreasing.
		if id[:10] < prev {
			t.Fatalf("NewID() went back in time: %q after %q", id[:10], prev)
		}
		prev = id[:10]
	}
}

func TestNames(t *testing.T) {
	t.Parallel()
	n := spool.DefaultNames()
	checks := map[string]string{
		n.TaskStream():               "SPOOL_TASKS",
		n.DLQStream():                "SPOOL_DLQ",
		n.AdvisoryStream():           "SPOOL_ADVISORIES",
		n.ResultsBucket():            "spool_results",
		n.UniqueBucket():             "spool_unique",
		n.Consumer(spool.High):       "spool-high",
		n.RouterConsumer():           "spool-dlq-router",
		n.PriorityFilter(spool.Idle): "spool.tasks.idle.>",
		n.SchedFilter():              "spool.sched.>",
		n.DLQFilter():                "spool.dlq.>",
		n.AdvisoryFilter():           "$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.SPOOL_TASKS.*",
	}
	for got, want := range checks {
		if got != want {
			t.Errorf("got %q, want %q", got, want)
		}
	}
	other, err := spool.NewNames("acme-jobs")
	if err != nil {
		t.Fatal(err)
	}
	if other.TaskStream() != "ACME-JOBS_TASKS" || other.ResultsBucket() != "acme-jobs_results" {
		t.Errorf("prefix not applied: %s %s", other.TaskStream(), other.ResultsBucket())
	}
	for _, bad := range []string{"", "a.b", "a b", "a>", strings.Repeat("p", 33)} {
		if _, err := spool.NewNames(bad); !errors.Is(err, spool.ErrInvalidPrefix) {
			t.Errorf("NewNames(%q): want ErrInvalidPrefix, got %v", bad, err)
		}
	}
}

func TestTaskSubjects(t *testing.T) {
	t.Parallel()
	n := spool.DefaultNames()
	subj, err := n.TaskSubject(spool.Normal, "email.send")
	if err != nil || subj != "spool.tasks.normal.email.send" {
		t.Fatalf("TaskSubject = %q, %v", subj, err)
	}
	if _, err := n.TaskSubject(spool.Priority(8), "x"); !errors.Is(err, spool.ErrInvalidPriority) {
		t.Errorf("TaskSubject with a bad priority: %v", err)
	}
	if _, err := n.TaskSubject(spool.High, "a..b"); !errors.Is(err, spool.ErrInvalidType) {
		t.Errorf("TaskSubject with a bad type: %v", err)
	}
	tests := []struct {
		subject string
		p       spool.Priority
		typ     string
		wantErr error
	}{
		{"spool.tasks.high.x", spool.High, "x", nil},
		{"spool.tasks.idle.a.b.c", spool.Idle, "a.b.c", nil},
		{"spool.tasks.bogus.x", 0, "", spool.ErrInvalidPriority},
		{"spool.tasks.high", 0, "", spool.ErrInvalidSubject},
		{"spool.tasks.high.", 0, "", spool.ErrInvalidType},
		{"other.tasks.high.x", 0, "", spool.ErrInvalidSubject},
		{"spool.sched.x", 0, "", spool.ErrInvalidSubject},
	}
	for _, tt := range tests {
		p, typ, err := n.ParseTaskSubject(tt.subject)
		if tt.wantErr != nil {
			if !errors.Is(err, tt.wantErr) {
				t.Errorf("ParseTaskSubject(%q) = %v, want %v", tt.subject, err, tt.wantErr)
			}
			continue
		}
		if err != nil || p != tt.p || typ != tt.typ {
			t.Errorf("ParseTaskSubject(%q) = %v, %q, %v", tt.subject, p, typ, err)
		}
	}
	dlq, err := n.DLQSubject(spool.Low, "img.resize")
	if err != nil || dlq != "spool.dlq.low.img.resize" {
		t.Fatalf("DLQSubject = %q, %v", dlq, err)
	}
	if p, typ, err := n.ParseDLQSubject(dlq); err != nil || p != spool.Low || typ != "img.resize" {
		t.Fatalf("ParseDLQSubject = %v %q %v", p, typ, err)
	}
	sched, err := n.SchedSubject("abc")
	if err != nil || sched != "spool.sched.abc" {
		t.Fatalf("SchedSubject = %q, %v", sched, err)
	}
	if id, err := n.ParseSchedSubject(sched); err != nil || id != "abc" {
		t.Fatalf("ParseSchedSubject = %q, %v", id, err)
	}
	if _, err := n.SchedSubject("a.b"); !errors.Is(err, spool.ErrInvalidID) {
		t.Errorf("SchedSubject(a.b): %v", err)
	}
}

func TestMetaRoundTrip(t *testing.T) {
	t.Parallel()
	retries := 5
	in := spool.Meta{
		ID: "task-1", MaxRetries: &retries, Timeout: 90 * time.Second,
		UniqueKey: "user:42", UniqueTTL: time.Hour, Key: "customer 42", Result: spool.DiscardResult, PriorAttempts: 2, Deferrals: 3,
		TraceParent: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
	}
	h := nats.Header{}
	if err := in.Encode(h); err != nil {
		t.Fatal(err)
	}
	if h.Get(spool.HeaderMsgID) != "task-1" || h.Get(spool.HeaderTaskID) != "task-1" {
		t.Fatalf("Encode must set both Nats-Msg-Id and Spool-Task-Id: %v", h)
	}
	out, err := spool.DecodeMeta(h)
	if err != nil {
		t.Fatal(err)
	}
	if out.ID != in.ID || *out.MaxRetries != 5 || out.Timeout != in.Timeout || out.UniqueKey != in.UniqueKey ||
		out.UniqueTTL != in.UniqueTTL || out.TraceParent != in.TraceParent || out.Key != in.Key ||
		out.PriorAttempts != in.PriorAttempts || out.Deferrals != in.Deferrals || out.Result != in.Result {
		t.Fatalf("round trip: got %+v, want %+v", out, in)
	}
}

func TestFormatScheduleAt(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 1, 2, 3, 4, 5, 600_000_000, time.FixedZone("x", 3600))
	if got, want := spool.FormatScheduleAt(at), "@at 2026-01-02T02:04:05.6Z"; got != want {
		t.Fatalf("got %q, want %q", got, want)
	}
}

func TestResultValue(t *testing.T) {
	t.Parallel()
	all := make([]byte, 256)
	for i := range all {
		all[i] = byte(i)
	}
	cases := []struct {
		name, out, stored, encoding string
	}{
		{"empty", "", "", ""},
		{"JSON object", `{"ok":true}`, `{"ok":true}`, ""},
		{"JSON with inner spaces and html", `{"a": "<b>&", "n": [1, 2]}`, `{"a": "<b>&", "n": [1, 2]}`, ""},
		{"JSON string", `"hi"`, `"hi"`, ""},
		{"text", "plain text", `"plain text"`, "text"},
		{"text with html and U+2028", "<b>&\u2028", `"\u003cb\u003e\u0026\u2028"`, "text"},
		{"JSON with a trailing newline", "{\"ok\":true}\n", `"{\"ok\":true}\n"`, "text"},
		{"invalid UTF-8 in a JSON string", "\"\xff\"", `"Iv8i"`, "base64"},
		{"all 256 byte values", string(all), "", "base64"},
	}
	for _, c := range cases {
		raw, enc := spool.ResultValue([]byte(c.out))
		if c.stored != "" && string(raw) != c.stored || enc != c.encoding {
			t.Errorf("%s: stored %s encoding %q, want %s %q", c.name, raw, enc, c.stored, c.encoding)
		}
		// Through a document as the worker writes it (the value verbatim)
		// and back: the same bytes.
		b := []byte(`{"id":"x"`)
		if len(raw) > 0 {
			b = append(append(b, `,"result":`...), raw...)
		}
		if enc != "" {
			b = append(b, `,"result_encoding":"`+enc+`"`...)
		}
		b = append(b, '}')
		var doc spool.Result
		if err := json.Unmarshal(b, &doc); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		got, err := doc.Output()
		if err != nil || !bytes.Equal(got, []byte(c.out)) {
			t.Errorf("%s: Output() = %q, %v; want %q", c.name, got, err, c.out)
		}
	}
	// A document written before result_encoding: the JSON value as stored.
	var legacy spool.Result
	if err := json.Unmarshal([]byte(`{"id":"x","result":"plain text"}`), &legacy); err != nil {
		t.Fatal(err)
	}
	if got, err := legacy.Output(); err != nil || string(got) != `"plain text"` {
		t.Errorf("legacy document: Output() = %q, %v", got, err)
	}
	for _, bad := range []spool.Result{
		{ID: "x", Result: json.RawMessage(`"!!"`), ResultEncoding: "base64"},
		{ID: "x", Result: json.RawMessage(`1`), ResultEncoding: "base64"},
		{ID: "x", Result: json.RawMessage(`"aGk="`), ResultEncoding: "hex"},
		{ID: "x", Result: json.RawMessage(`{}`), ResultEncoding: "text"},
	} {
		if _, err := bad.Output(); err == nil {
			t.Errorf("Output() of %s (%s) gave no error", bad.Result, bad.ResultEncoding)
		}
	}
	if !spool.StateCompleted.Terminal() || !spool.StateDead.Terminal() || spool.StateRetrying.Terminal() {
		t.Error("terminal states wrong")
	}
}

func TestParseKeyedSubjects(t *testing.T) {
	n := spool.DefaultNames()
	for _, c := range []struct {
		subject, token, typ string
		held                bool
	}{
		{n.HeldSubject("YWNjdC0x", "ledger.post"), "YWNjdC0x", "ledger.post", true},
		{n.KickSubject("YWNjdC0x", "ledger.post"), "YWNjdC0x", "ledger.post", false},
	} {
		parse := n.ParseKickSubject
		if c.held {
			parse = n.ParseHeldSubject
		}
		token, typ, err := parse(c.subject)
		if err != nil || token != c.token || typ != c.typ {
			t.Errorf("%s: %q %q %v, want %q %q", c.subject, token, typ, err, c.token, c.typ)
		}
	}
	for _, bad := range []string{"spool.kick.", "spool.kick.x", "spool.held.x.y", "other.kick.x.y"} {
		if _, _, err := n.ParseKickSubject(bad); err == nil {
			t.Errorf("ParseKickSubject(%q) accepted", bad)
		}
	}
}
