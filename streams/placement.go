package streams

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/spoolq/spool/shared/jsproto"
	"github.com/spoolq/spool/shared/logging"
)

// spreadTries bounds the step-downs SpreadLeaders asks of one partition.
const spreadTries = 5

// spreadWait bounds how long SpreadLeaders waits for one step-down's
// election.
const spreadWait = 5 * time.Second

// readWait bounds how long SpreadLeaders tries to read a partition's
// leader while the cluster does not answer.
const readWait = 3 * spreadWait

// SpreadLeaders moves the leaders of the task partitions onto different
// servers: partition k's leader goes to the k-th of its replicas' servers
// (sorted by name), by asking the current leader to step down in favour of
// it ($JS.API.STREAM.LEADER.STEPDOWN with a preferred placement). One
// partition or one replica: nothing to do. A partition it cannot move is
// logged and left where it is: placement is a matter of speed, not of
// correctness. Provision calls it.
func SpreadLeaders(ctx context.Context, js jetstream.JetStream, t Topology, logger *slog.Logger) error {
	logger = logging.OrDefault(logger)
	if t.Settings.Partitions <= 1 || t.Settings.Replicas <= 1 {
		return nil
	}
	for k := range t.Settings.Partitions {
		name := t.Names.PartitionStream(k)
		leader, want, err := partitionLeader(ctx, js, name, k)
		if err != nil {
			return err
		}
		for try := 0; leader != want && try < spreadTries; try++ {
			if err := stepDownTo(ctx, js, name, want); err != nil {
				logger.DebugContext(ctx, "moving a partition leader", "stream", name, "to", want, "error", err)
			}
			deadline := time.Now().Add(spreadWait)
			for leader != want && time.Now().Before(deadline) {
				select {
				case <-ctx.Done():
					return ctx.Err()
				case <-time.After(50 * time.Millisecond):
				}
				if leader, _, err = partitionLeader(ctx, js, name, k); err != nil {
					return err
				}
			}
		}
		if leader != want {
			logger.WarnContext(ctx, "partition leader not moved; partitions may share a server", "stream", name, "leader", leader, "wanted", want)
			continue
		}
		logger.DebugContext(ctx, "partition leader placed", "stream", name, "leader", leader)
	}
	return nil
}

// partitionLeader returns stream name's leader and the server partition k's
// leader belongs on ("" while there is no leader). It is read during the
// elections SpreadLeaders itself starts, which may swallow a request: each
// try is bounded and tried again for up to readWait.
func partitionLeader(ctx context.Context, js jetstream.JetStream, name string, k int) (leader, want string, err error) {
	rctx, cancel := context.WithTimeout(ctx, readWait)
	defer cancel()
	var s jetstream.Stream
	err = jsproto.Tries{Conn: js.Conn()}.Do(rctx, "asking for its leader", func(ctx context.Context) (err error) {
		s, err = js.Stream(ctx, name)
		return err
	})
	if err != nil {
		return "", "", fmt.Errorf("reading stream %q: %w", name, err)
	}
	ci := s.CachedInfo().Cluster
	if ci == nil || ci.Leader == "" {
		return "", "", nil
	}
	peers := []string{ci.Leader}
	for _, r := range ci.Replicas {
		peers = append(peers, r.Name)
	}
	slices.Sort(peers)
	return ci.Leader, peers[k%len(peers)], nil
}

// stepDownTo asks stream name's leader to hand over to server want.
func stepDownTo(ctx context.Context, js jetstream.JetStream, name, want string) error {
	body, err := json.Marshal(map[string]any{"placement": map[string]string{"preferred": want}})
	if err != nil {
		return err
	}
	rctx, cancel := context.WithTimeout(ctx, spreadWait)
	defer cancel()
	m, err := js.Conn().RequestWithContext(rctx, "$JS.API.STREAM.LEADER.STEPDOWN."+name, body)
	if err != nil {
		return fmt.Errorf("step-down of %q: %w", name, err)
	}
	var resp struct {
		Error *struct {
			Description string `json:"description"`
		} `json:"error"`
	}
	if err := json.Unmarshal(m.Data, &resp); err != nil {
		return fmt.Errorf("step-down of %q: %w", name, err)
	}
	if resp.Error != nil {
		return fmt.Errorf("step-down of %q: %s", name, resp.Error.Description)
	}
	return nil
}
