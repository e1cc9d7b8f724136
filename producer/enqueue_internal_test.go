package producer

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// TestAckLost separates publishes whose outcome is unknown (the unique key
// must be kept) from those refused for sure (the key is released).
func TestAckLost(t *testing.T) {
	t.Parallel()
	tests := []struct {
		err  error
		want bool
	}{
		{context.DeadlineExceeded, true},
		{fmt.Errorf("publish: %w", context.Canceled), true},
		{nats.ErrTimeout, true},
		{jetstream.ErrNoStreamResponse, false},
		{&jetstream.APIError{ErrorCode: 10047, Description: "insufficient resources"}, false},
		{errors.New("something else"), false},
	}
	for _, tt := range tests {
		if got := ackLost(tt.err); got != tt.want {
			t.Errorf("ackLost(%v) = %v, want %v", tt.err, got, tt.want)
		}
	}
}
