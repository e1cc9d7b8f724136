package httpapi_test

import (
	"net/http"
	"strconv"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/spoolq/spool/producer/httpapi"
	spool "github.com/spoolq/spool/shared"
	"github.com/spoolq/spool/streams/dlq"
	"github.com/spoolq/spool/streams/embedded"
)

func (b *broker) deadLetter(t *testing.T, id string, p spool.Priority, typ string, reason spool.Reason) uint64 {
	t.Helper()
	h := nats.Header{}
	h.Set(spool.HeaderTaskID, id)
	h.Set(spool.HeaderReason, string(reason))
	h.Set(spool.HeaderError, "failed")
	h.Set(spool.HeaderAttempts, "4")
	h.Set(spool.HeaderOriginalSubject, "spool.tasks."+p.String()+"."+typ)
	h.Set(spool.HeaderOriginalSeq, "9")
	ack, err := b.js.PublishMsg(ctxFor(t), &nats.Msg{Subject: "spool.dlq." + p.String() + "." + typ, Header: h, Data: []byte(`{"id":"` + id + `"}`)})
	if err != nil {
		t.Fatal(err)
	}
	return ack.Sequence
}

func TestDLQRoutes(t *testing.T) {
	t.Parallel()
	b := startBroker(t, embedded.Options{}, httpapi.Options{Token: "tok"})
	b.deadLetter(t, "a", spool.High, "email.send", spool.ReasonNoHandler)
	seqB := b.deadLetter(t, "b", spool.Low, "email.send", spool.ReasonError)
	b.deadLetter(t, "c", spool.High, "report", spool.ReasonNoHandler)

	if r := b.do(t, "GET", "/v1/dlq", "", nil); r.status != http.StatusUnauthorized {
		t.Fatalf("GET /v1/dlq without token: %d", r.status)
	}
	r := b.do(t, "GET", "/v1/dlq?priority=high&limit=1", "tok", nil)
	page := decode[dlq.Page](t, r)
	if r.status != 200 || len(page.Letters) != 1 || page.Letters[0].TaskID != "a" || page.Next == 0 {
		t.Fatalf("page 1: %d %s", r.status, r.body)
	}
	r = b.do(t, "GET", "/v1/dlq?priority=high&since=1h&after="+strconv.FormatUint(page.Next, 10), "tok", nil)
	page = decode[dlq.Page](t, r)
	if len(page.Letters) != 1 || page.Letters[0].TaskID != "c" || page.Next != 0 {
		t.Fatalf("page 2: %s", r.body)
	}
	r = b.do(t, "GET", "/v1/dlq?reason=error&type=email.send", "tok", nil)
	if page = decode[dlq.Page](t, r); len(page.Letters) != 1 || page.Letters[0].Seq != seqB {
		t.Fatalf("reason=error: %s", r.body)
	}
	r = b.do(t, "GET", "/v1/dlq/"+strconv.FormatUint(seqB, 10), "tok", nil)
	if l := decode[dlq.Letter](t, r); r.status != 200 || l.TaskID != "b" || l.Attempts != 4 || string(l.Payload) != `{"id":"b"}` {
		t.Fatalf("get: %d %s", r.status, r.body)
	}

	r = b.do(t, "POST", "/v1/dlq/"+strconv.FormatUint(seqB, 10)+"/replay", "tok", nil)
	rep := decode[dlq.Replayed](t, r)
	if r.status != 200 || rep.TaskID != "b" || rep.Subject != "spool.tasks.low.email.send" || rep.Replays != 1 {
		t.Fatalf("replay: %d %s", r.status, r.body)
	}
	if n := b.streamMsgs(t); n != 1 {
		t.Fatalf("task stream holds %d after replay, want 1", n)
	}
	r = b.do(t, "GET", "/v1/tasks/b", "tok", nil)
	if doc := decode[spool.Result](t, r); doc.State != spool.StatePending || doc.Replays != 1 {
		t.Fatalf("result after replay: %s", r.body)
	}

	errs := []struct {
		method, path string
		status       int
		code         string
	}{
		{"GET", "/v1/dlq/" + strconv.FormatUint(seqB, 10), 404, "not_found"},
		{"POST", "/v1/dlq/" + strconv.FormatUint(seqB, 10) + "/replay", 404, "not_found"},
		{"GET", "/v1/dlq/x", 400, "invalid_seq"},
		{"GET", "/v1/dlq?priority=urgent", 400, "invalid_filter"},
		{"GET", "/v1/dlq?reason=nope", 400, "invalid_filter"},
		{"GET", "/v1/dlq?since=yesterday", 400, "invalid_filter"},
		{"GET", "/v1/dlq?limit=0", 400, "invalid_filter"},
		{"DELETE", "/v1/dlq", 400, "filter_required"},
		{"DELETE", "/v1/dlq?all=true&type=x", 400, "invalid_filter"},
		{"POST", "/v1/dlq", 405, "method_not_allowed"},
		{"DELETE", "/v1/dlq/1", 405, "method_not_allowed"},
	}
	for _, e := range errs {
		r := b.do(t, e.method, e.path, "tok", nil)
		if code, _, _ := r.errorCode(); r.status != e.status || code != e.code {
			t.Errorf("%s %s: %d %s, want %d %s", e.method, e.path, r.status, code, e.status, e.code)
		}
	}

	r = b.do(t, "DELETE", "/v1/dlq?reason=no_handler&type=report", "tok", nil)
	if got := decode[map[string]uint64](t, r); r.status != 200 || got["purged"] != 1 {
		t.Fatalf("purge: %d %s", r.status, r.body)
	}
	r = b.do(t, "DELETE", "/v1/dlq?all=true", "tok", nil)
	if got := decode[map[string]uint64](t, r); r.status != 200 || got["purged"] != 1 {
		t.Fatalf("purge all: %d %s", r.status, r.body)
	}
}
