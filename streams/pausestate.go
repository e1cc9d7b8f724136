package streams

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	spool "github.com/spoolq/spool/shared"
)

// PauseForever is the pause-until time of a pause without an end: the
// year 9999.
var PauseForever = time.Date(9999, time.December, 31, 0, 0, 0, 0, time.UTC)

// TypeConsumerPause is how long the type consumer of priority p and
// pattern stays paused, where workers pull by type: the later end of the
// priority's pause and, for an exact type, the type's pause, both read
// from the pause bucket (kv). Zero means not paused. A pause without an
// end gives PauseForever; an undecodable record counts as one.
func TypeConsumerPause(ctx context.Context, kv jetstream.KeyValue, p spool.Priority, pattern string, now time.Time) (time.Time, error) {
	keys := []string{spool.PriorityPauseKey(p)}
	if !strings.ContainsAny(pattern, "*>") {
		keys = append(keys, pattern)
	}
	var until time.Time
	for _, key := range keys {
		e, err := kv.Get(ctx, key)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			continue
		}
		if err != nil {
			return time.Time{}, fmt.Errorf("reading pause %q: %w", key, err)
		}
		tp := spool.TypePause{Type: key}
		if err := json.Unmarshal(e.Value(), &tp); err != nil {
			tp = spool.TypePause{Type: key}
		}
		if !tp.Active(now) {
			continue
		}
		end := PauseForever
		if tp.Until != nil {
			end = *tp.Until
		}
		if end.After(until) {
			until = end
		}
	}
	return until, nil
}
