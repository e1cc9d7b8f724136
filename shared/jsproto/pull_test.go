package jsproto_test

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/spoolq/spool/shared/jsproto"
)

func TestPullRequestJSON(t *testing.T) {
	t.Parallel()
	cases := []struct {
		r    jsproto.PullRequest
		want string
	}{
		{jsproto.PullRequest{Batch: 10, NoWait: true}, `{"batch":10,"no_wait":true}`},
		{jsproto.PullRequest{Batch: 1, Expires: 30 * time.Second}, `{"batch":1,"expires":30000000000}`},
		{jsproto.PullRequest{Batch: 1, Expires: time.Second, Heartbeat: 100 * time.Millisecond}, `{"batch":1,"expires":1000000000,"idle_heartbeat":100000000}`},
	}
	for _, c := range cases {
		got := string(c.r.AppendJSON(nil))
		if got != c.want {
			t.Errorf("%+v: %s, want %s", c.r, got, c.want)
		}
		if !json.Valid([]byte(got)) {
			t.Errorf("%s is not JSON", got)
		}
	}
}

// pull sends the request body to consumer of stream and returns the first
// message its reply subject receives; the test fails when none comes
// within wait.
func pull(t *testing.T, nc *nats.Conn, stream, consumer string, body []byte, wait time.Duration) *nats.Msg {
	t.Helper()
	inbox := nc.NewInbox()
	// A channel subscription: a synchronous one turns a 503 into an error.
	ch := make(chan *nats.Msg, 1)
	sub, err := nc.ChanSubscribe(inbox, ch)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := nc.PublishRequest(jsproto.NextSubject(stream, consumer), inbox, body); err != nil {
		t.Fatal(err)
	}
	select {
	case m := <-ch:
		return m
	case <-time.After(wait):
		t.Fatalf("no answer to the pull request %s", body)
		return nil
	}
}

func wantStatus(t *testing.T, m *nats.Msg, code string, end jsproto.End, wantErr error) jsproto.Status {
	t.Helper()
	st, ok := jsproto.CheckStatus(m)
	if !ok {
		t.Fatalf("got a delivered message (%q), want status %s", m.Data, code)
	}
	if st.Code != code || st.End != end || !errors.Is(st.Err, wantErr) {
		t.Fatalf("got status %s (%s, %v), want %s (%s, %v)", st, st.End, st.Err, code, end, wantErr)
	}
	return st
}

// Every status the server answers a pull with that a single server can be
// made to send, provoked for real.
func TestPullStatusesFromServer(t *testing.T) {
	t.Parallel()
	_, nc, js := startServer(t)
	ctx := testContext(t)

	t.Run("delivered message", func(t *testing.T) {
		createStream(t, js, "DELIVER", jetstream.ConsumerConfig{})
		if _, err := js.Publish(ctx, "DELIVER.a", []byte("task")); err != nil {
			t.Fatal(err)
		}
		// A waiting pull, not a no-wait one: the consumer learns of a stored
		// message asynchronously, so a no-wait pull sent right after the
		// publish's ack can still be answered 404.
		m := pull(t, nc, "DELIVER", "c", jsproto.PullRequest{Batch: 1, Expires: 5 * time.Second}.AppendJSON(nil), timeout)
		if _, ok := jsproto.CheckStatus(m); ok {
			t.Fatalf("a delivered message read as a status: %+v", m.Header)
		}
		md, err := jsproto.NewMsg(m).Metadata()
		if err != nil || md.Stream != "DELIVER" || md.Consumer != "c" || md.Sequence.Stream != 1 {
			t.Fatalf("metadata %+v, %v", md, err)
		}
	})
	t.Run("404 no messages", func(t *testing.T) {
		createStream(t, js, "EMPTY", jetstream.ConsumerConfig{})
		m := pull(t, nc, "EMPTY", "c", jsproto.PullRequest{Batch: 5, NoWait: true}.AppendJSON(nil), timeout)
		wantStatus(t, m, "404", jsproto.Done, jetstream.ErrNoMessages)
	})
	t.Run("408 request timeout", func(t *testing.T) {
		createStream(t, js, "EXPIRE", jetstream.ConsumerConfig{})
		m := pull(t, nc, "EXPIRE", "c", jsproto.PullRequest{Batch: 1, Expires: 50 * time.Millisecond}.AppendJSON(nil), timeout)
		wantStatus(t, m, "408", jsproto.Done, nats.ErrTimeout)
	})
	t.Run("100 idle heartbeat", func(t *testing.T) {
		createStream(t, js, "HEARTBEAT", jetstream.ConsumerConfig{})
		m := pull(t, nc, "HEARTBEAT", "c", jsproto.PullRequest{Batch: 1, Expires: 5 * time.Second, Heartbeat: 50 * time.Millisecond}.AppendJSON(nil), timeout)
		st := wantStatus(t, m, "100", jsproto.Continue, nil)
		if st.Err != nil {
			t.Fatalf("a heartbeat with an error: %v", st.Err)
		}
	})
	t.Run("409 consumer deleted", func(t *testing.T) {
		createStream(t, js, "DELETED", jetstream.ConsumerConfig{})
		inbox := nc.NewInbox()
		sub, err := nc.SubscribeSync(inbox)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = sub.Unsubscribe() }()
		if err := nc.PublishRequest(jsproto.NextSubject("DELETED", "c"), inbox, jsproto.PullRequest{Batch: 1, Expires: time.Minute}.AppendJSON(nil)); err != nil {
			t.Fatal(err)
		}
		// A round trip after the request is not enough: the server hands
		// pull requests to the consumer's own goroutine, and one deleted
		// before it has the request drops it unanswered. Read the
		// consumer's info until it counts the request waiting.
		c, err := js.Consumer(ctx, "DELETED", "c")
		if err != nil {
			t.Fatal(err)
		}
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		deadline := time.Now().Add(timeout)
		for {
			info, err := c.Info(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if info.NumWaiting == 1 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%d requests waiting after %s, want 1", info.NumWaiting, timeout)
			}
			<-tick.C
		}
		if err := js.DeleteConsumer(ctx, "DELETED", "c"); err != nil {
			t.Fatal(err)
		}
		m, err := sub.NextMsg(timeout)
		if err != nil {
			t.Fatal(err)
		}
		wantStatus(t, m, "409", jsproto.Terminal, jetstream.ErrConsumerDeleted)
	})
	t.Run("409 exceeded MaxWaiting", func(t *testing.T) {
		createStream(t, js, "WAITING", jetstream.ConsumerConfig{MaxWaiting: 1})
		inbox := nc.NewInbox()
		sub, err := nc.SubscribeSync(inbox + ".*")
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = sub.Unsubscribe() }()
		body := jsproto.PullRequest{Batch: 1, Expires: time.Minute}.AppendJSON(nil)
		for _, r := range []string{".1", ".2"} {
			if err := nc.PublishRequest(jsproto.NextSubject("WAITING", "c"), inbox+r, body); err != nil {
				t.Fatal(err)
			}
		}
		m, err := sub.NextMsg(timeout)
		if err != nil {
			t.Fatal(err)
		}
		if m.Subject != inbox+".2" {
			t.Fatalf("the answer went to %s, want the second request's", m.Subject)
		}
		st := wantStatus(t, m, "409", jsproto.Failed, jsproto.ErrPullLimit)
		if st.Description != "Exceeded MaxWaiting" {
			t.Fatalf("description %q", st.Description)
		}
		if err := js.DeleteConsumer(ctx, "WAITING", "c"); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("409 exceeded MaxRequestBatch", func(t *testing.T) {
		createStream(t, js, "BATCH", jetstream.ConsumerConfig{MaxRequestBatch: 2})
		m := pull(t, nc, "BATCH", "c", jsproto.PullRequest{Batch: 3, NoWait: true}.AppendJSON(nil), timeout)
		st := wantStatus(t, m, "409", jsproto.Failed, jsproto.ErrPullLimit)
		if st.Description != "Exceeded MaxRequestBatch of 2" {
			t.Fatalf("description %q", st.Description)
		}
	})
	t.Run("409 exceeded MaxRequestExpires", func(t *testing.T) {
		createStream(t, js, "EXPIRES", jetstream.ConsumerConfig{MaxRequestExpires: time.Second})
		m := pull(t, nc, "EXPIRES", "c", jsproto.PullRequest{Batch: 1, Expires: time.Minute}.AppendJSON(nil), timeout)
		wantStatus(t, m, "409", jsproto.Failed, jsproto.ErrPullLimit)
	})
	t.Run("409 exceeded MaxRequestMaxBytes", func(t *testing.T) {
		createStream(t, js, "MAXBYTES", jetstream.ConsumerConfig{MaxRequestMaxBytes: 100})
		m := pull(t, nc, "MAXBYTES", "c", []byte(`{"batch":1,"max_bytes":1000,"no_wait":true}`), timeout)
		wantStatus(t, m, "409", jsproto.Failed, jsproto.ErrPullLimit)
	})
	t.Run("409 message size exceeds MaxBytes", func(t *testing.T) {
		createStream(t, js, "BIG", jetstream.ConsumerConfig{})
		if _, err := js.Publish(ctx, "BIG.a", make([]byte, 1000)); err != nil {
			t.Fatal(err)
		}
		// A waiting pull, as for a delivered message above: a no-wait one can
		// reach the consumer before it has learnt of the stored message.
		m := pull(t, nc, "BIG", "c", []byte(`{"batch":1,"max_bytes":10,"expires":5000000000}`), timeout)
		wantStatus(t, m, "409", jsproto.Done, jetstream.ErrMaxBytesExceeded)
	})
	t.Run("400 bad request", func(t *testing.T) {
		createStream(t, js, "BAD", jetstream.ConsumerConfig{})
		m := pull(t, nc, "BAD", "c", []byte(`{"batch":`), timeout)
		wantStatus(t, m, "400", jsproto.Terminal, jetstream.ErrBadRequest)
	})
	t.Run("503 no responders", func(t *testing.T) {
		createStream(t, js, "GONE", jetstream.ConsumerConfig{})
		if err := js.DeleteStream(ctx, "GONE"); err != nil {
			t.Fatal(err)
		}
		m := pull(t, nc, "GONE", "c", jsproto.PullRequest{Batch: 1, NoWait: true}.AppendJSON(nil), timeout)
		wantStatus(t, m, "503", jsproto.Failed, nats.ErrNoResponders)
	})
}

// The statuses a single server does not send on demand (a cluster's
// leader change, a server shutting down, a pinned consumer), and the ones
// above, read from messages built as the server writes them.
func TestCheckStatus(t *testing.T) {
	t.Parallel()
	status := func(code, desc string) *nats.Msg {
		h := nats.Header{"Status": {code}}
		if desc != "" {
			h.Set("Description", desc)
		}
		return &nats.Msg{Header: h}
	}
	cases := []struct {
		m       *nats.Msg
		end     jsproto.End
		wantErr error
	}{
		{status("100", "Idle Heartbeat"), jsproto.Continue, nil},
		{status("100", "FlowControl Request"), jsproto.Continue, nil},
		{status("404", "No Messages"), jsproto.Done, jetstream.ErrNoMessages},
		{status("408", "Request Timeout"), jsproto.Done, nats.ErrTimeout},
		{status("409", "Consumer Deleted"), jsproto.Terminal, jetstream.ErrConsumerDeleted},
		{status("409", "Leadership Change"), jsproto.Failed, jetstream.ErrConsumerLeadershipChanged},
		{status("409", "Exceeded MaxRequestBatch of 2"), jsproto.Failed, jsproto.ErrPullLimit},
		{status("409", "Exceeded MaxWaiting"), jsproto.Failed, jsproto.ErrPullLimit},
		{status("409", "Exceeded MaxRequestExpires of 1s"), jsproto.Failed, jsproto.ErrPullLimit},
		{status("409", "Exceeded MaxRequestMaxBytes of 100"), jsproto.Failed, jsproto.ErrPullLimit},
		{status("409", "Message Size Exceeds MaxBytes"), jsproto.Done, jetstream.ErrMaxBytesExceeded},
		{status("409", "Batch Completed"), jsproto.Done, jetstream.ErrBatchCompleted},
		{status("409", "Server Shutdown"), jsproto.Failed, jetstream.ErrServerShutdown},
		{status("400", "Bad Request"), jsproto.Terminal, jetstream.ErrBadRequest},
		{status("423", "Nats-Pin-Id mismatch"), jsproto.Failed, jetstream.ErrPinIDMismatch},
		{status("503", ""), jsproto.Failed, nats.ErrNoResponders},
	}
	for _, c := range cases {
		name := c.m.Header.Get("Status") + " " + c.m.Header.Get("Description")
		st, ok := jsproto.CheckStatus(c.m)
		switch {
		case !ok:
			t.Errorf("%s: read as a delivered message", name)
		case st.End != c.end:
			t.Errorf("%s: %s, want %s", name, st.End, c.end)
		case c.wantErr == nil && st.Err != nil, c.wantErr != nil && !errors.Is(st.Err, c.wantErr):
			t.Errorf("%s: err %v, want %v", name, st.Err, c.wantErr)
		}
	}
	// An unknown status fails the request with its description.
	st, ok := jsproto.CheckStatus(status("409", "Something New"))
	if !ok || st.End != jsproto.Failed || st.Err == nil || st.String() != "409 Something New" {
		t.Errorf("unknown 409: %+v", st)
	}
	for _, m := range []*nats.Msg{
		{Data: []byte("task")},
		{Header: nats.Header{"Spool-Task-Id": {"t1"}}},
		{Data: []byte("task"), Header: nats.Header{"Status": {"404"}}},
	} {
		if st, ok := jsproto.CheckStatus(m); ok {
			t.Errorf("%+v read as status %s", m, st)
		}
	}
}
