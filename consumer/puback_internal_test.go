package consumer

import (
	"errors"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

func TestPubAckError(t *testing.T) {
	t.Parallel()
	status := func(code string) nats.Header { return nats.Header{"Status": {code}} }
	cases := []struct {
		name string
		msg  *nats.Msg
		want error // nil: stored
		api  bool  // want a *jetstream.APIError
	}{
		{"stored", &nats.Msg{Data: []byte(`{"stream":"KV_spool_results","seq":42}`)}, nil, false},
		{"stored in a domain named error", &nats.Msg{Data: []byte(`{"stream":"KV_x","domain":"error","seq":1}`)}, nil, false},
		{"duplicate", &nats.Msg{Data: []byte(`{"stream":"KV_x","seq":1,"duplicate":true}`)}, nil, false},
		{"refused", &nats.Msg{Data: []byte(`{"error":{"code":503,"err_code":10077,"description":"maximum messages exceeded"}}`)}, nil, true},
		{"no responders", &nats.Msg{Header: status("503")}, jetstream.ErrNoStreamResponse, false},
		{"empty", &nats.Msg{}, jetstream.ErrInvalidJSAck, false},
		{"garbage", &nats.Msg{Data: []byte(`nope`)}, jetstream.ErrInvalidJSAck, false},
		{"no stream", &nats.Msg{Data: []byte(`{"seq":1}`)}, jetstream.ErrInvalidJSAck, false},
	}
	for _, c := range cases {
		err := pubAckError(c.msg)
		var apiErr *jetstream.APIError
		switch {
		case c.api:
			if !errors.As(err, &apiErr) || apiErr.ErrorCode != 10077 {
				t.Errorf("%s: %v, want the API error", c.name, err)
			}
		case c.want == nil && err != nil:
			t.Errorf("%s: %v, want stored", c.name, err)
		case c.want != nil && !errors.Is(err, c.want):
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
	}
}
