package spool_test

import (
	"testing"

	"github.com/nats-io/nats.go"

	spool "github.com/spoolq/spool/shared"
)

func TestTaskID(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		hdr  map[string]string
		want string
	}{
		{"task id header", map[string]string{spool.HeaderTaskID: "a", spool.HeaderMsgID: "b"}, "a"},
		{"msg id fallback", map[string]string{spool.HeaderMsgID: "b"}, "b"},
		{"sequence fallback", nil, "42"},
		{"invalid id falls back to the sequence", map[string]string{spool.HeaderTaskID: "not valid"}, "42"},
	}
	for _, tc := range tests {
		h := nats.Header{}
		for k, v := range tc.hdr {
			h.Set(k, v)
		}
		if got := spool.TaskID(h, 42); got != tc.want {
			t.Errorf("%s: TaskID = %q, want %q", tc.name, got, tc.want)
		}
	}
}
