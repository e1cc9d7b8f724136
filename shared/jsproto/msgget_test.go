package jsproto_test

import (
	"errors"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/spoolq/spool/shared/jsproto"
)

func TestGetMsg(t *testing.T) {
	_, nc, js := startServer(t)
	ctx := testContext(t)
	createStream(t, js, "GET", jetstream.ConsumerConfig{})
	for _, m := range []struct{ subj, data string }{{"GET.a", "a1"}, {"GET.b", "b1"}, {"GET.a", "a2"}} {
		if _, err := js.Publish(ctx, m.subj, []byte(m.data)); err != nil {
			t.Fatal(err)
		}
	}

	cases := []struct {
		name  string
		req   jsproto.MsgGetRequest
		found bool
		seq   uint64
		data  string
	}{
		{"by sequence", jsproto.MsgGetRequest{Seq: 2}, true, 2, "b1"},
		{"last on a subject", jsproto.MsgGetRequest{LastBySubj: "GET.a"}, true, 3, "a2"},
		{"sequence past the end", jsproto.MsgGetRequest{Seq: 9}, false, 0, ""},
		{"subject without a message", jsproto.MsgGetRequest{LastBySubj: "GET.c"}, false, 0, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m, found, err := jsproto.GetMsg(ctx, nc, "GET", c.req)
			if err != nil {
				t.Fatal(err)
			}
			if found != c.found || m.Seq != c.seq || string(m.Data) != c.data {
				t.Fatalf("got found=%v seq=%d data=%q, want found=%v seq=%d data=%q", found, m.Seq, m.Data, c.found, c.seq, c.data)
			}
		})
	}

	t.Run("a deleted message", func(t *testing.T) {
		st, err := js.Stream(ctx, "GET")
		if err != nil {
			t.Fatal(err)
		}
		if err := st.DeleteMsg(ctx, 2); err != nil {
			t.Fatal(err)
		}
		if _, found, err := jsproto.GetMsg(ctx, nc, "GET", jsproto.MsgGetRequest{Seq: 2}); err != nil || found {
			t.Fatalf("got found=%v, err=%v; want not found", found, err)
		}
	})

	t.Run("no such stream", func(t *testing.T) {
		_, found, err := jsproto.GetMsg(ctx, nc, "NOPE", jsproto.MsgGetRequest{Seq: 1})
		var apiErr *jetstream.APIError
		if !errors.As(err, &apiErr) || apiErr.ErrorCode != jetstream.JSErrCodeStreamNotFound || found {
			t.Fatalf("got found=%v, err=%v; want the API's stream-not-found error", found, err)
		}
	})
}
