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

// spreadTries bounds the step-downs SpreadLeaders asks of one stream.
const spreadTries = 5

// spreadWait bounds how long SpreadLeaders waits for one step-down's
// election.
const spreadWait = 5 * time.Second

// readWait bounds how long SpreadLeaders tries to read a stream's leader
// while the cluster does not answer.
const readWait = 3 * spreadWait

// SpreadLeaders spreads the leader work of a replicated topology over its
// servers. With K > 1 task partitions, partition k's leader goes to the
// k-th of its replicas' servers (sorted by name). Then the results bucket's
// leader, which stores a write for every task of every partition, goes to
// a server that leads no task partition, when there is one (N > K). Each
// move asks the current leader to step down in favour of the chosen server
// ($JS.API.STREAM.LEADER.STEPDOWN with a preferred placement). One replica:
// nothing to do. A leader it cannot move is logged and left where it is:
// placement is a matter of speed, not of correctness. Provision calls it
// once the buckets exist.
func SpreadLeaders(ctx context.Context, js jetstream.JetStream, t Topology, logger *slog.Logger) error {
	logger = logging.OrDefault(logger)
	if t.Settings.Replicas <= 1 {
		return nil
	}
	taken := map[string]bool{} // servers leading a task partition
	for k := range t.Settings.Partitions {
		name := t.Names.PartitionStream(k)
		leader, peers, err := streamLeader(ctx, js, name)
		if err != nil {
			return err
		}
		if t.Settings.Partitions > 1 && leader != "" {
			leader, err = moveLeader(ctx, js, name, leader, peers[k%len(peers)], logger)
			if err != nil {
				return err
			}
		}
		taken[leader] = true
	}
	return placeResults(ctx, js, "KV_"+t.Names.ResultsBucket(), taken, logger)
}

// placeResults moves the leader of the results bucket's stream off the
// servers in taken (those leading a task partition) onto the first of its
// other replicas' servers, sorted by name. Where every replica's server
// leads a partition it stays.
func placeResults(ctx context.Context, js jetstream.JetStream, name string, taken map[string]bool, logger *slog.Logger) error {
	leader, peers, err := streamLeader(ctx, js, name)
	if err != nil || leader == "" || !taken[leader] {
		return err
	}
	for _, p := range peers {
		if !taken[p] {
			_, err = moveLeader(ctx, js, name, leader, p, logger)
			return err
		}
	}
	return nil
}

// moveLeader asks stream name's leader to hand over to server want, up to
// spreadTries times, each time waiting spreadWait for the election. It
// returns the leader it leaves the stream with.
func moveLeader(ctx context.Context, js jetstream.JetStream, name, leader, want string, logger *slog.Logger) (string, error) {
	var err error
	for try := 0; leader != want && try < spreadTries; try++ {
		if err := stepDownTo(ctx, js, name, want); err != nil {
			logger.DebugContext(ctx, "moving a stream leader", "stream", name, "to", want, "error", err)
		}
		deadline := time.Now().Add(spreadWait)
		for leader != want && time.Now().Before(deadline) {
			select {
			case <-ctx.Done():
				return leader, ctx.Err()
			case <-time.After(50 * time.Millisecond):
			}
			if leader, _, err = streamLeader(ctx, js, name); err != nil {
				return leader, err
			}
		}
	}
	if leader != want {
		logger.WarnContext(ctx, "stream leader not moved; leaders may share a server", "stream", name, "leader", leader, "wanted", want)
		return leader, nil
	}
	logger.DebugContext(ctx, "stream leader placed", "stream", name, "leader", leader)
	return leader, nil
}

// streamLeader returns stream name's leader ("" while there is none) and
// the servers of its replicas, the leader's included, sorted by name. It
// is read during the elections SpreadLeaders itself starts, which may
// swallow a request: each try is bounded and tried again for up to
// readWait.
func streamLeader(ctx context.Context, js jetstream.JetStream, name string) (leader string, peers []string, err error) {
	rctx, cancel := context.WithTimeout(ctx, readWait)
	defer cancel()
	var s jetstream.Stream
	err = jsproto.Tries{Conn: js.Conn()}.Do(rctx, "asking for its leader", func(ctx context.Context) (err error) {
		s, err = js.Stream(ctx, name)
		return err
	})
	if err != nil {
		return "", nil, fmt.Errorf("reading stream %q: %w", name, err)
	}
	ci := s.CachedInfo().Cluster
	if ci == nil || ci.Leader == "" {
		return "", nil, nil
	}
	peers = []string{ci.Leader}
	for _, r := range ci.Replicas {
		peers = append(peers, r.Name)
	}
	slices.Sort(peers)
	return ci.Leader, peers, nil
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
