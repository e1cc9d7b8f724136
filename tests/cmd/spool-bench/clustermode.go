package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/spoolq/spool/producer"
	spool "github.com/spoolq/spool/shared"
	"github.com/spoolq/spool/streams"
)

// clusterMode names the report section of the cluster scenario.
func clusterMode(syncAlways bool) string {
	if syncAlways {
		return "cluster R3, SyncAlways"
	}
	return "cluster R3, default sync"
}

// clusterConfig is cfg with the counts the cluster runs: a 3-node cluster
// on the same cores does a third of the work per core, so the counts of a
// mode are capped where the single-node run would take minutes. Profiles
// (-profile) are written for every node.
func clusterConfig(cfg config, syncAlways bool) config {
	if syncAlways {
		cfg.batchN, cfg.processN = cfg.batchNAlw, cfg.processNAlw
	}
	cfg.queued = min(cfg.queued, 4*cfg.processN)
	return cfg
}

// runCluster measures enqueue, processing, pickup and shares on a local
// 3-node cluster with R3 streams, raw against Spool, then the stall a
// leader change causes; the same scenario code as one server, pointed at
// the cluster.
func runCluster(ctx context.Context, cfg config, syncAlways bool, res *results, log *slog.Logger) error {
	mode := clusterMode(syncAlways)
	cfg = clusterConfig(cfg, syncAlways)
	b, cl, err := openCluster(ctx, cfg, syncAlways, mode, "", res, log)
	if err != nil {
		return err
	}
	defer b.close(cl)
	res.modes = append(res.modes, mode)
	steps := []struct {
		name string
		fn   func(context.Context) error
	}{
		{"enqueue", b.enqueue},
		{"processing", b.processing},
		{"pickup", b.pickup},
		{"shares", b.shares},
	}
	for run := 1; run <= cfg.runs; run++ {
		for _, s := range steps {
			b.log.Info("scenario", "name", s.name, "run", run)
			runtime.GC()
			if err := s.fn(ctx); err != nil {
				return fmt.Errorf("%s, %s, run %d: %w", mode, s.name, run, err)
			}
		}
		b.log.Info("scenario", "name", "leader change", "run", run)
		if err := b.leaderChange(ctx, cl); err != nil {
			return fmt.Errorf("%s, leader change, run %d: %w", mode, run, err)
		}
	}
	return b.purge(ctx)
}

// openCluster starts the cluster (its nodes with mappings, see nodeChild),
// provisions the default topology with R3 and returns a bench pointed at
// it.
func openCluster(ctx context.Context, cfg config, syncAlways bool, mode, mappings string, res *results, log *slog.Logger) (*bench, *cluster, error) {
	dir, err := os.MkdirTemp("", "spool-bench-cluster-")
	if err != nil {
		return nil, nil, fmt.Errorf("creating the store directory: %w", err)
	}
	log = log.With("sync", mode)
	cl, err := startCluster(ctx, dir, syncAlways, mappings, log)
	if err != nil {
		os.RemoveAll(dir)
		return nil, nil, err
	}
	fail := func(err error) (*bench, *cluster, error) {
		cl.stop()
		os.RemoveAll(dir)
		return nil, nil, err
	}
	nc, err := nats.Connect(cl.srv.url, nats.Name("spool-bench"), nats.MaxReconnects(-1))
	if err != nil {
		return fail(fmt.Errorf("connecting: %w", err))
	}
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(producer.DefaultPublishWindow))
	if err != nil {
		nc.Close()
		return fail(fmt.Errorf("opening JetStream: %w", err))
	}
	names := spool.DefaultNames()
	topo, err := streams.New(names, benchSettings(streams.Settings{Replicas: clusterSize}))
	if err != nil {
		nc.Close()
		return fail(err)
	}
	pctx, cancel := context.WithTimeout(ctx, clusterReady)
	defer cancel()
	if err := streams.Provision(pctx, js, topo, slog.New(slog.DiscardHandler)); err != nil {
		nc.Close()
		return fail(fmt.Errorf("provisioning R%d: %w", clusterSize, err))
	}
	b := &bench{cfg: cfg, mode: mode, srv: cl.srv, nc: nc, js: js, names: names, topo: topo, res: res, log: log, backlogLoRate: map[string]float64{}}
	return b, cl, nil
}

func (b *bench) close(cl *cluster) {
	b.nc.Close()
	cl.stop()
	os.RemoveAll(cl.dir)
}

// streamLeader returns the node index of a stream's leader.
func (b *bench) streamLeader(ctx context.Context, stream string) (int, error) {
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	s, err := b.js.Stream(rctx, stream)
	if err != nil {
		return 0, fmt.Errorf("reading stream %s: %w", stream, err)
	}
	info := s.CachedInfo()
	if info.Cluster == nil {
		return 0, fmt.Errorf("stream %s has no cluster info", stream)
	}
	for i := range clusterSize {
		if info.Cluster.Leader == nodeName(i) {
			return i, nil
		}
	}
	return 0, fmt.Errorf("stream %s has no leader (%q)", stream, info.Cluster.Leader)
}

// waitCurrent waits until every stream (buckets included) has a leader
// and every replica is current: after a node restart the next measurement
// starts on a whole cluster.
func (b *bench) waitCurrent(ctx context.Context) error {
	deadline := time.Now().Add(clusterReady)
	var last string
	for time.Now().Before(deadline) {
		last = b.notCurrent(ctx)
		if last == "" {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
	return fmt.Errorf("cluster not current after %s: %s", clusterReady, last)
}

// notCurrent names a stream without a leader or with a replica behind, or
// returns "".
func (b *bench) notCurrent(ctx context.Context) string {
	rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	l := b.js.ListStreams(rctx)
	for info := range l.Info() {
		ci := info.Cluster
		if ci == nil || ci.Leader == "" || len(ci.Replicas) != clusterSize-1 {
			return fmt.Sprintf("stream %s: no leader or replicas missing", info.Config.Name)
		}
		for _, r := range ci.Replicas {
			if !r.Current || r.Offline {
				return fmt.Sprintf("stream %s: replica %s behind", info.Config.Name, r.Name)
			}
		}
	}
	if err := l.Err(); err != nil {
		return err.Error()
	}
	return ""
}
