package dlq_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"

	spool "github.com/spoolq/spool/shared"
	"github.com/spoolq/spool/streams"
	"github.com/spoolq/spool/streams/dlq"
	"github.com/spoolq/spool/streams/streamstest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

type env struct {
	t     *testing.T
	js    jetstream.JetStream
	names spool.Names
	d     *dlq.DLQ
}

func newEnv(t *testing.T) *env {
	t.Helper()
	e := streamstest.Start(t, streams.Settings{})
	return &env{t: t, js: e.JS, names: e.Names, d: dlq.New(e.JS, e.Names)}
}

func ctx(t *testing.T) context.Context { return streamstest.Context(t) }

// deadLetter is what the worker stores: the task's headers plus the
// dead-letter headers, on spool.dlq.<priority>.<type>.
func deadLetter(id string, p spool.Priority, typ string, reason spool.Reason, origSeq uint64) *nats.Msg {
	h := nats.Header{}
	if id != "" {
		h.Set(spool.HeaderTaskID, id)
	}
	h.Set(spool.HeaderMaxRetries, "2")
	h.Set(spool.HeaderError, "boom "+id)
	h.Set(spool.HeaderReason, string(reason))
	h.Set(spool.HeaderAttempts, "3")
	h.Set(spool.HeaderFailedAt, time.Now().UTC().Format(time.RFC3339Nano))
	h.Set(spool.HeaderOriginalSubject, "spool.tasks."+p.String()+"."+typ)
	h.Set(spool.HeaderOriginalSeq, strconv.FormatUint(origSeq, 10))
	h.Set(spool.HeaderMsgID, "dlq-SPOOL_TASKS-"+strconv.FormatUint(origSeq, 10))
	return &nats.Msg{Subject: "spool.dlq." + p.String() + "." + typ, Header: h, Data: []byte(`{"n":` + strconv.FormatUint(origSeq, 10) + `}`)}
}

func (e *env) publish(m *nats.Msg) uint64 {
	e.t.Helper()
	ack, err := e.js.PublishMsg(ctx(e.t), m)
	if err != nil {
		e.t.Fatal(err)
	}
	return ack.Sequence
}

func ids(p dlq.Page) []string {
	var s []string
	for _, l := range p.Letters {
		s = append(s, l.TaskID)
	}
	return s
}

func pri(p spool.Priority) *spool.Priority { return &p }

func TestListFilters(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	letters := []struct {
		id     string
		p      spool.Priority
		typ    string
		reason spool.Reason
	}{
		{"a", spool.High, "email.send", spool.ReasonError},
		{"b", spool.High, "email", spool.ReasonPermanent},
		{"c", spool.Low, "email.send", spool.ReasonTimeout},
		{"d", spool.Critical, "image.resize", spool.ReasonError},
		{"e", spool.High, "email.send", spool.ReasonNoHandler},
	}
	var mid time.Time
	for i, l := range letters {
		if i == 3 {
			mid = time.Now()
		}
		e.publish(deadLetter(l.id, l.p, l.typ, l.reason, uint64(i+1)))
	}
	all, err := e.d.List(ctx(t), dlq.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(ids(all)); got != "[a b c d e]" || all.Next != 0 {
		t.Fatalf("all: %s next %d", got, all.Next)
	}
	a := all.Letters[0]
	if a.Priority != spool.High || a.Type != "email.send" || a.Reason != spool.ReasonError || a.Attempts != 3 ||
		a.OriginalSubject != "spool.tasks.high.email.send" || a.OriginalSeq != 1 || a.FailedAt == nil ||
		string(a.Payload) != `{"n":1}` || a.Error != "boom a" || a.Seq == 0 {
		t.Errorf("letter a: %+v", a)
	}

	since := mid
	tests := []struct {
		name string
		f    dlq.Filter
		want string
	}{
		{"priority", dlq.Filter{Priority: pri(spool.High)}, "[a b e]"},
		{"type is exact", dlq.Filter{Type: "email"}, "[b]"},
		{"type", dlq.Filter{Type: "email.send"}, "[a c e]"},
		{"priority and type", dlq.Filter{Priority: pri(spool.High), Type: "email.send"}, "[a e]"},
		{"reason", dlq.Filter{Reason: spool.ReasonError}, "[a d]"},
		{"type and reason", dlq.Filter{Type: "email.send", Reason: spool.ReasonNoHandler}, "[e]"},
		{"since", dlq.Filter{Since: since}, "[d e]"},
		{"until", dlq.Filter{Until: since}, "[a b c]"},
		{"after", dlq.Filter{After: all.Letters[2].Seq}, "[d e]"},
		{"nothing", dlq.Filter{Priority: pri(spool.Idle)}, "[]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := e.d.List(ctx(t), tt.f)
			if err != nil {
				t.Fatal(err)
			}
			if got := fmt.Sprint(ids(p)); got != tt.want {
				t.Errorf("got %s, want %s", got, tt.want)
			}
		})
	}

	// Pages of two walk the whole list in order.
	var walked []string
	f := dlq.Filter{Limit: 2}
	for pages := 0; ; pages++ {
		if pages > 5 {
			t.Fatal("paging does not end")
		}
		p, err := e.d.List(ctx(t), f)
		if err != nil {
			t.Fatal(err)
		}
		walked = append(walked, ids(p)...)
		if p.Next == 0 {
			break
		}
		f.After = p.Next
	}
	if got := fmt.Sprint(walked); got != "[a b c d e]" {
		t.Errorf("paged: %s", got)
	}

	for _, bad := range []dlq.Filter{
		{Type: "bad type"}, {Reason: "nope"}, {Limit: dlq.MaxLimit + 1},
		{Since: time.Now(), Until: time.Now().Add(-time.Hour)}, {Priority: pri(spool.Priority(9))},
	} {
		if _, err := e.d.List(ctx(t), bad); !errors.Is(err, dlq.ErrInvalidFilter) {
			t.Errorf("List(%+v) = %v, want ErrInvalidFilter", bad, err)
		}
	}
	if _, err := e.d.Get(ctx(t), 999); !errors.Is(err, dlq.ErrNotFound) {
		t.Errorf("Get(999) = %v, want ErrNotFound", err)
	}
}

func TestReplay(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	kv, err := e.js.KeyValue(ctx(t), e.names.ResultsBucket())
	if err != nil {
		t.Fatal(err)
	}
	dead, _ := json.Marshal(spool.Result{ID: "t1", Type: "email.send", Priority: spool.High, State: spool.StateDead, Attempts: 3, Error: "boom"})
	if _, err := kv.Put(ctx(t), "t1", dead); err != nil {
		t.Fatal(err)
	}
	m := deadLetter("t1", spool.High, "email.send", spool.ReasonError, 41)
	m.Header.Set(spool.HeaderTraceParent, "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
	seq := e.publish(m)

	r, err := e.d.Replay(ctx(t), seq)
	if err != nil {
		t.Fatal(err)
	}
	if r.TaskID != "t1" || r.Subject != "spool.tasks.high.email.send" || r.Replays != 1 || !r.ResultWritten || r.StreamSeq == 0 {
		t.Errorf("replay: %+v", r)
	}
	tasks, err := e.js.Stream(ctx(t), e.names.TaskStream())
	if err != nil {
		t.Fatal(err)
	}
	task, err := tasks.GetMsg(ctx(t), r.StreamSeq)
	if err != nil {
		t.Fatal(err)
	}
	if task.Subject != "spool.tasks.high.email.send" || string(task.Data) != `{"n":41}` {
		t.Errorf("replayed task %s %q", task.Subject, task.Data)
	}
	for k, want := range map[string]string{
		spool.HeaderTaskID: "t1", spool.HeaderMsgID: dlq.ReplayMsgID(seq), spool.HeaderMaxRetries: "2",
		spool.HeaderReplays: "1", spool.HeaderTraceParent: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
		spool.HeaderReason: "", spool.HeaderError: "", spool.HeaderAttempts: "", spool.HeaderFailedAt: "",
		spool.HeaderOriginalSubject: "", spool.HeaderOriginalSeq: "",
	} {
		if got := task.Header.Get(k); got != want {
			t.Errorf("replayed header %s = %q, want %q", k, got, want)
		}
	}
	entry, err := kv.Get(ctx(t), "t1")
	if err != nil {
		t.Fatal(err)
	}
	var doc spool.Result
	if err := json.Unmarshal(entry.Value(), &doc); err != nil {
		t.Fatal(err)
	}
	if doc.State != spool.StatePending || doc.Attempts != 0 || doc.Replays != 1 || doc.ReplayedAt == nil ||
		doc.Error != "" || doc.Priority != spool.High || doc.Type != "email.send" {
		t.Errorf("result after replay: %s", entry.Value())
	}
	if n, at := spool.ReplayOf(task.Header); n != 1 || at == nil || !at.Equal(*doc.ReplayedAt) {
		t.Errorf("replay headers: %d at %v, want 1 at %v", n, at, doc.ReplayedAt)
	}
	if _, err := e.d.Get(ctx(t), seq); !errors.Is(err, dlq.ErrNotFound) {
		t.Errorf("dead letter still there after replay: %v", err)
	}
	if _, err := e.d.Replay(ctx(t), seq); !errors.Is(err, dlq.ErrNotFound) {
		t.Errorf("second replay = %v, want ErrNotFound", err)
	}

	// Dead again, replayed again: the count goes on.
	m2 := deadLetter("t1", spool.High, "email.send", spool.ReasonError, r.StreamSeq)
	m2.Header.Set(spool.HeaderReplays, "1")
	r2, err := e.d.Replay(ctx(t), e.publish(m2))
	if err != nil {
		t.Fatal(err)
	}
	if r2.Replays != 2 {
		t.Errorf("second replay count %d, want 2", r2.Replays)
	}

	// Without Spool-Task-Id the id is the original sequence, as the worker
	// named it.
	r3, err := e.d.Replay(ctx(t), e.publish(deadLetter("", spool.Low, "x", spool.ReasonPanic, 77)))
	if err != nil {
		t.Fatal(err)
	}
	if r3.TaskID != "77" {
		t.Errorf("id without Spool-Task-Id: %q", r3.TaskID)
	}
	// A task of partition 1 is named p1-<seq>: the dead letter's
	// Nats-Msg-Id names the partition when Spool-Task-Id is not valid.
	m4 := deadLetter("", spool.Low, "x", spool.ReasonBadInput, 78)
	m4.Header.Set(spool.HeaderTaskID, "bad id!")
	m4.Header.Set(spool.HeaderMsgID, dlq.PartitionMsgID(e.names.PartitionStream(1), 78))
	r4, err := e.d.Replay(ctx(t), e.publish(m4))
	if err != nil {
		t.Fatal(err)
	}
	if r4.TaskID != "p1-78" {
		t.Errorf("id of a partition's task without a valid Spool-Task-Id: %q", r4.TaskID)
	}
}

// A dead letter stays until its replay is stored.
func TestReplayKeepsTheDeadLetterOnFailure(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	bad := deadLetter("t2", spool.Normal, "x", spool.ReasonError, 5)
	bad.Header.Set(spool.HeaderOriginalSubject, "spool.sched.t2")
	badSeq := e.publish(bad)
	if _, err := e.d.Replay(ctx(t), badSeq); !errors.Is(err, dlq.ErrNotReplayable) {
		t.Errorf("replay to a schedule subject = %v, want ErrNotReplayable", err)
	}
	seq := e.publish(deadLetter("t3", spool.Normal, "x", spool.ReasonError, 6))
	if err := e.js.DeleteStream(ctx(t), e.names.TaskStream()); err != nil {
		t.Fatal(err)
	}
	if _, err := e.d.Replay(ctx(t), seq); err == nil {
		t.Fatal("replay without a task stream succeeded")
	}
	for _, s := range []uint64{badSeq, seq} {
		if _, err := e.d.Get(ctx(t), s); err != nil {
			t.Errorf("dead letter %d gone after a failed replay: %v", s, err)
		}
	}
}

func TestPurge(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	for i, r := range []spool.Reason{spool.ReasonError, spool.ReasonPanic, spool.ReasonError, spool.ReasonTimeout} {
		p := spool.High
		if i == 3 {
			p = spool.Low
		}
		e.publish(deadLetter(strconv.Itoa(i), p, "job", r, uint64(i+1)))
	}
	if _, err := e.d.Purge(ctx(t), dlq.Filter{Limit: 5}, false); !errors.Is(err, dlq.ErrNoFilter) {
		t.Fatalf("purge without filter = %v, want ErrNoFilter", err)
	}
	n, err := e.d.Purge(ctx(t), dlq.Filter{Reason: spool.ReasonError}, false)
	if err != nil || n != 2 {
		t.Fatalf("purge reason=error: %d, %v", n, err)
	}
	n, err = e.d.Purge(ctx(t), dlq.Filter{Priority: pri(spool.Low)}, false)
	if err != nil || n != 1 {
		t.Fatalf("purge priority=low: %d, %v", n, err)
	}
	p, err := e.d.List(ctx(t), dlq.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(ids(p)); got != "[1]" {
		t.Fatalf("left after purges: %s", got)
	}
	n, err = e.d.Purge(ctx(t), dlq.Filter{}, true)
	if err != nil || n != 1 {
		t.Fatalf("purge all: %d, %v", n, err)
	}
	if size, err := e.d.Size(ctx(t)); err != nil || size != 0 {
		t.Fatalf("size after purge all: %d, %v", size, err)
	}
}

// Listing 10,000 dead letters reads pages, not the stream.
func TestListManyDeadLetters(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const n = 10_000
	for i := range n {
		reason := spool.ReasonError
		if i == n-1 {
			reason = spool.ReasonPanic
		}
		m := deadLetter("t"+strconv.Itoa(i), spool.Priority(i%5), "bulk", reason, uint64(i+1))
		if _, err := e.js.PublishMsgAsync(m); err != nil {
			t.Fatal(err)
		}
		if i%1000 == 999 { // stay under the async window on a busy machine
			select {
			case <-e.js.PublishAsyncComplete():
			case <-ctx(t).Done():
				t.Fatal("publishing timed out")
			}
		}
	}

	start := time.Now()
	p, err := e.d.List(ctx(t), dlq.Filter{Priority: pri(spool.Low), Limit: 50})
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Letters) != 50 || p.Next == 0 || p.Letters[0].TaskID != "t3" {
		t.Fatalf("first page: %d letters, next %d, first %+v", len(p.Letters), p.Next, p.Letters[0].TaskID)
	}
	t.Logf("first page of 50: %s", time.Since(start))

	start = time.Now()
	p, err = e.d.List(ctx(t), dlq.Filter{Reason: spool.ReasonPanic})
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(ids(p)) != fmt.Sprintf("[t%d]", n-1) {
		t.Fatalf("panic letters: %v", ids(p))
	}
	t.Logf("scan of %d for one reason: %s", n, time.Since(start))
}
