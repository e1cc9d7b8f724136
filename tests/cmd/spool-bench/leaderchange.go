package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	spool "github.com/spoolq/spool/shared"
)

// ackWatch records when every ack of a task stream goes by: a core
// subscription on the ack subjects sees the acks of raw and Spool alike,
// without touching the consumer.
type ackWatch struct {
	nc    *nats.Conn
	sub   *nats.Subscription
	mu    sync.Mutex
	times []time.Time
}

func watchAcks(ctx context.Context, nodeURL, stream string) (*ackWatch, error) {
	nc, err := nats.Connect(nodeURL, nats.Name("spool-bench-acks"), nats.NoReconnect())
	if err != nil {
		return nil, fmt.Errorf("connecting the ack watcher: %w", err)
	}
	w := &ackWatch{nc: nc}
	w.sub, err = nc.Subscribe("$JS.ACK."+stream+".>", func(m *nats.Msg) {
		if len(m.Data) != 0 && !strings.HasPrefix(string(m.Data), "+ACK") {
			return // progress, nak or term: not a completion
		}
		now := time.Now()
		w.mu.Lock()
		w.times = append(w.times, now)
		w.mu.Unlock()
	})
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("subscribing to acks: %w", err)
	}
	fctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := nc.FlushWithContext(fctx); err != nil {
		nc.Close()
		return nil, fmt.Errorf("ack watcher: %w", err)
	}
	return w, nil
}

func (w *ackWatch) count() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.times)
}

// longestGap is the longest time without an ack from since on (the moment
// the leader changed) to the last ack.
func (w *ackWatch) longestGap(since time.Time) time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	var gap time.Duration
	last := since
	// From the change to the first ack after it, and between acks after.
	for _, t := range w.times {
		if t.Before(since) {
			continue
		}
		gap = max(gap, t.Sub(last))
		last = t
	}
	return gap
}

func (w *ackWatch) close() { w.nc.Close() }

// leaderChange drains queued tasks at concurrency 100 and, a quarter of the
// way in, moves the task stream's leader: a step-down
// ($JS.API.STREAM.LEADER.STEPDOWN), then a SIGKILL of the leader's node
// (restarted afterwards). The figure is the longest time between two task
// completions (acks) from the change on.
func (b *bench) leaderChange(ctx context.Context, cl *cluster) error {
	n := b.cfg.leaderN
	stream := b.names.TaskStream()
	kinds := []string{"step-down", "SIGKILL"}
	if !b.cfg.leaderKill {
		kinds = kinds[:1]
	}
	for _, kind := range kinds {
		row := "leader change, " + kind + " of the task stream leader: longest gap between completions (ms)"
		for _, variant := range []string{"raw", "spool"} {
			if err := b.waitCurrent(ctx); err != nil {
				return err
			}
			if err := b.purge(ctx); err != nil {
				return err
			}
			if err := b.fill(ctx, spool.Normal, n); err != nil {
				return err
			}
			leader, err := b.streamLeader(ctx, stream)
			if err != nil {
				return err
			}
			// Watch from a node that survives the change.
			w, err := watchAcks(ctx, cl.nodes[(leader+1)%clusterSize].url, stream)
			if err != nil {
				return err
			}
			var changed time.Time
			var changeErr error
			done := make(chan struct{})
			onReady := func() error {
				go func() {
					defer close(done)
					for w.count() < n/4 {
						select {
						case <-ctx.Done():
							changeErr = ctx.Err()
							return
						case <-time.After(time.Millisecond):
						}
					}
					changed = time.Now()
					if kind == "step-down" {
						changeErr = b.stepDown(ctx, stream)
					} else {
						changeErr = cl.kill(leader)
					}
				}()
				return nil
			}
			_, err = runConsume(ctx, b.srv, onReady, "-mode", variant, "-task", "drain", "-n", strconv.Itoa(n), "-conc", "100")
			<-done
			gap := w.longestGap(changed)
			w.close()
			if kind == "SIGKILL" {
				if rerr := cl.startNode(ctx, leader); rerr != nil {
					return errors.Join(err, rerr)
				}
			}
			if err := errors.Join(err, changeErr); err != nil {
				return fmt.Errorf("%s %s: %w", variant, kind, err)
			}
			b.add(row, variant, float64(gap.Microseconds())/1e3)
		}
	}
	return b.waitCurrent(ctx)
}

// stepDown asks a stream's leader to step down, retrying while the request
// goes unanswered (an election may swallow it).
func (b *bench) stepDown(ctx context.Context, stream string) error {
	var last error
	for range 10 {
		m, err := b.nc.RequestWithContext(ctx, "$JS.API.STREAM.LEADER.STEPDOWN."+stream, nil)
		if err == nil {
			var resp struct {
				Success bool `json:"success"`
				Error   *struct {
					Description string `json:"description"`
				} `json:"error"`
			}
			if err := json.Unmarshal(m.Data, &resp); err != nil {
				return fmt.Errorf("step-down reply: %w", err)
			}
			if resp.Success {
				return nil
			}
			if resp.Error != nil {
				return fmt.Errorf("step-down: %s", resp.Error.Description)
			}
		}
		last = err
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
	return fmt.Errorf("step-down of %s: %w", stream, last)
}
