package jsproto_test

import (
	"errors"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/spoolq/spool/shared/jsproto"
)

func TestParsePubAck(t *testing.T) {
	t.Parallel()
	status := func(code string) nats.Header { return nats.Header{"Status": {code}} }
	cases := []struct {
		name    string
		msg     *nats.Msg
		want    jsproto.PubAck
		wantErr error
		api     bool // want a *jetstream.APIError
	}{
		{"stored", &nats.Msg{Data: []byte(`{"stream":"KV_spool_results","seq":42}`)}, jsproto.PubAck{Seq: 42}, nil, false},
		{"stored in a domain named error", &nats.Msg{Data: []byte(`{"stream":"KV_x","domain":"error","seq":1}`)}, jsproto.PubAck{Seq: 1}, nil, false},
		{"duplicate", &nats.Msg{Data: []byte(`{"stream":"KV_x","seq":1,"duplicate":true}`)}, jsproto.PubAck{Seq: 1, Duplicate: true}, nil, false},
		{"spaced", &nats.Msg{Data: []byte(`{"stream":"S", "seq": 7, "duplicate": true}`)}, jsproto.PubAck{Seq: 7, Duplicate: true}, nil, false},
		{"refused", &nats.Msg{Data: []byte(`{"error":{"code":503,"err_code":10077,"description":"maximum messages exceeded"}}`)}, jsproto.PubAck{}, nil, true},
		{"no responders", &nats.Msg{Header: status("503")}, jsproto.PubAck{}, jetstream.ErrNoStreamResponse, false},
		{"empty", &nats.Msg{}, jsproto.PubAck{}, jetstream.ErrInvalidJSAck, false},
		{"garbage", &nats.Msg{Data: []byte(`nope`)}, jsproto.PubAck{}, jetstream.ErrInvalidJSAck, false},
		{"no stream", &nats.Msg{Data: []byte(`{"seq":1}`)}, jsproto.PubAck{}, jetstream.ErrInvalidJSAck, false},
	}
	for _, c := range cases {
		got, err := jsproto.ParsePubAck(c.msg)
		var apiErr *jetstream.APIError
		switch {
		case c.api:
			if !errors.As(err, &apiErr) || apiErr.ErrorCode != 10077 || apiErr.Code != 503 || apiErr.Description != "maximum messages exceeded" {
				t.Errorf("%s: %v, want the API error", c.name, err)
			}
		case c.wantErr == nil && err != nil:
			t.Errorf("%s: %v, want stored", c.name, err)
		case c.wantErr != nil && !errors.Is(err, c.wantErr):
			t.Errorf("%s: %v, want %v", c.name, err, c.wantErr)
		case got != c.want:
			t.Errorf("%s: %+v, want %+v", c.name, got, c.want)
		}
	}
}

func TestRetryNoResponders(t *testing.T) {
	t.Parallel()
	if !jsproto.RetryNoResponders(jetstream.ErrNoStreamResponse, 0) {
		t.Error("a first no-responders answer is not retried")
	}
	if jsproto.RetryNoResponders(jetstream.ErrNoStreamResponse, jsproto.NoResponderRetries) {
		t.Error("retried past NoResponderRetries")
	}
	if jsproto.RetryNoResponders(jetstream.ErrInvalidJSAck, 0) {
		t.Error("an invalid acknowledgement is retried")
	}
}
