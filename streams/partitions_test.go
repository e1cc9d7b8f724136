package streams_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	spool "github.com/spoolq/spool/shared"
	"github.com/spoolq/spool/streams"
	"github.com/spoolq/spool/streams/embedded"
	"github.com/spoolq/spool/streams/streamstest"
)

// A client publishes to the usual task subjects; the server's mapping
// spreads them over three partition streams on a 3-node cluster, each
// stores them back under spool.tasks.<priority>.<type>, every task of one
// subject lands in one partition, the five consumers of each partition
// see their priority's tasks, and the partition leaders sit on three
// different servers. Provisioning again changes nothing; provisioning fewer
// partitions is refused.
func TestProvisionPartitions(t *testing.T) {
	t.Parallel()
	const k = 3
	names := spool.DefaultNames()
	src, dst := names.PartitionMapping(k)
	js := startCluster(t, embedded.Options{Name: "part", Mappings: map[string]string{src: dst}})
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	topo, err := streams.New(names, streams.Settings{Replicas: 3, Partitions: k, Consumers: streams.ConsumersByPriority})
	if err != nil {
		t.Fatal(err)
	}
	for range 2 { // idempotent
		if err := streams.Provision(ctx, js, topo, testLogger(t)); err != nil {
			t.Fatal(err)
		}
	}

	// 5 priorities × 8 types, 3 tasks each.
	const perSubject = 3
	where := map[string]string{} // subject → stream
	for _, p := range spool.Priorities {
		for i := range 8 {
			subject, err := names.TaskSubject(p, fmt.Sprintf("type%d.sub", i))
			if err != nil {
				t.Fatal(err)
			}
			for range perSubject {
				ack, err := js.Publish(ctx, subject, []byte("x"))
				if err != nil {
					t.Fatal(err)
				}
				if prev, ok := where[subject]; ok && prev != ack.Stream {
					t.Fatalf("%s went to %s and %s", subject, prev, ack.Stream)
				}
				where[subject] = ack.Stream
			}
		}
	}
	leaders := map[string]bool{}
	var total uint64
	for part := range k {
		s, err := js.Stream(ctx, names.PartitionStream(part))
		if err != nil {
			t.Fatal(err)
		}
		info := s.CachedInfo()
		if info.State.Msgs == 0 {
			t.Errorf("partition %d holds no task of 40 subjects", part)
		}
		total += info.State.Msgs
		leaders[info.Cluster.Leader] = true
		if got := streams.PartitionsOf(info.Config); part == 0 && got != k {
			t.Errorf("SPOOL_TASKS records %d partitions, want %d", got, k)
		}
		// A consumer's pending count follows the stream's stores a moment
		// later (the server signals consumers from a goroutine of its own,
		// and a consumer led by another server counts its replica of the
		// stream).
		pending := map[spool.Priority]uint64{}
		streamstest.WaitFor(t, 10*time.Second, func() error {
			var consumed uint64
			for _, p := range spool.Priorities {
				cons, err := s.Consumer(ctx, names.Consumer(p))
				if err != nil {
					t.Fatal(err)
				}
				ci, err := cons.Info(ctx)
				if err != nil {
					t.Fatal(err)
				}
				pending[p] = ci.NumPending
				consumed += ci.NumPending
			}
			if consumed != info.State.Msgs {
				return fmt.Errorf("partition %d: consumers see %d of %d tasks (%v)", part, consumed, info.State.Msgs, pending)
			}
			return nil
		})
		for _, p := range spool.Priorities {
			cons, err := s.Consumer(ctx, names.Consumer(p))
			if err != nil {
				t.Fatal(err)
			}
			// A task's stored subject is the plain task subject.
			if pending[p] > 0 {
				b, err := cons.Fetch(1)
				if err != nil {
					t.Fatal(err)
				}
				for m := range b.Messages() {
					if got, _, err := names.ParseTaskSubject(m.Subject()); err != nil || got != p {
						t.Errorf("partition %d, consumer %s: subject %q (%v)", part, p, m.Subject(), err)
					}
					if err := m.Nak(); err != nil {
						t.Fatal(err)
					}
				}
			}
		}
	}
	if total != 40*perSubject {
		t.Errorf("partitions hold %d tasks, want %d", total, 40*perSubject)
	}
	if len(leaders) != k {
		t.Errorf("partition leaders on %d servers (%v), want %d", len(leaders), leaders, k)
	}

	fewer, err := streams.New(names, streams.Settings{Replicas: 3, Partitions: 2})
	if err != nil {
		t.Fatal(err)
	}
	err = streams.Provision(ctx, js, fewer, testLogger(t))
	if !errors.Is(err, streams.ErrConflict) || !strings.Contains(err.Error(), "SPOOL_PARTITIONS") {
		t.Errorf("shrinking to 2 partitions: %v, want a conflict naming SPOOL_PARTITIONS", err)
	}
}
