package conformance_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/spoolq/spool/consumer"
	"github.com/spoolq/spool/producer"
	spool "github.com/spoolq/spool/shared"
	"github.com/spoolq/spool/streams"
	"github.com/spoolq/spool/streams/admin"
	"github.com/spoolq/spool/streams/streamstest"
)

const partitions = 3

// Tasks spread over three task partitions on a 3-node cluster, one worker
// pulling every partition: every task completes, the weights order them
// across the partitions, a failing task is dead-lettered by the worker and
// a crashing one by the DLQ router whatever its partition, a queued task of any
// partition can be cancelled, and a leader change of one partition leaves
// the others working.
func TestPartitions(t *testing.T) {
	t.Parallel()
	// By priority: pulling by type, the worker would make a consumer per
	// type, priority and partition, about 200 here (bytypeparts_test.go in
	// the fault suite covers partitions pulled by type).
	settings := streams.Settings{Storage: "file", Partitions: partitions, AckWait: time.Second, MaxDeliver: 2, Consumers: streams.ConsumersByPriority}
	env := streamstest.StartCluster(t, 3, settings)
	// StartCluster provisioned the partitions under the default prefix,
	// the one its servers map.
	client, err := producer.New(env.Connect(t), producer.WithLogger(streamstest.Logger(t)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(client.Close)
	s := &stack{t: t, env: env, names: env.Names, client: client}
	s.router()

	// A task that crashes its worker at every delivery, in a partition
	// after the first: the router reads it there and dead-letters it.
	crash, crashType, part := s.enqueueOutsidePartition0("crashes")
	cons, err := s.taskConsumer(s.names.PartitionStream(part), spool.Normal, crashType)
	if err != nil {
		t.Fatal(err)
	}
	stop := crashing(t, cons)
	t.Cleanup(stop)
	r := s.wait(crash, spool.StateDead)
	stop()
	if r.Reason != spool.ReasonMaxDeliver {
		t.Errorf("crashing task: %+v, want dead with reason max_deliver", r)
	}
	m := s.deadLetter(spool.Normal, crashType)
	if m.Header.Get(spool.HeaderTaskID) != crash {
		t.Errorf("dead letter of %s: %v", crash, m.Header)
	}
	// Its dedup id names the partition: sequences repeat across them.
	if got, want := m.Header.Get(spool.HeaderMsgID), "dlq-"+s.names.PartitionStream(part)+"-"; !strings.HasPrefix(got, want) {
		t.Errorf("dead letter id %q, want %s<seq>", got, want)
	}

	// A queued task of a partition after the first is found and cancelled.
	// Cancel looks for a queued task with reads a replica that has not
	// stored it yet may answer (direct get): try again while it is not
	// found (such a Cancel changes nothing).
	cancelled, _, _ := s.enqueueOutsidePartition0("cancelled")
	streamstest.WaitFor(t, 10*time.Second, func() error {
		r, err := s.client.Cancel(streamstest.Context(t), cancelled)
		if errors.Is(err, producer.ErrTaskNotFound) {
			return fmt.Errorf("cancelling queued task %s: %w", cancelled, err)
		}
		if err != nil || r.State != spool.StateCancelled {
			t.Errorf("cancelling queued task %s: %+v, %v; want cancelled", cancelled, r, err)
		}
		return nil
	})

	// Queued before any worker runs: 12 types × 5 priorities × 2.
	var ids []string
	prio := map[string]spool.Priority{}
	for i := range 12 {
		for _, p := range spool.Priorities {
			for range 2 {
				res := s.enqueue(producer.NewTask("part.t"+strconv.Itoa(i), nil), producer.AtPriority(p))
				ids = append(ids, res.ID)
				prio[res.ID] = p
			}
		}
	}
	perm := s.enqueue(producer.NewTask("card.charge", nil), producer.AtPriority(spool.High))
	for k := range partitions {
		if n := s.queued(k); n == 0 {
			t.Errorf("partition %d holds no task", k)
		}
	}

	var mu sync.Mutex
	var order []spool.Priority
	mux := consumer.NewMux()
	mux.HandleFunc("card.charge", func(ctx context.Context, task *consumer.Task) ([]byte, error) {
		return nil, consumer.Permanent(errors.New("card declined"))
	})
	for i := range 12 {
		mux.HandleFunc("part.t"+strconv.Itoa(i), func(ctx context.Context, task *consumer.Task) ([]byte, error) {
			mu.Lock()
			order = append(order, task.Priority)
			mu.Unlock()
			return nil, nil
		})
	}
	s.worker(mux, consumer.WithConcurrency(1, 1)) // every partition: the default
	for _, id := range ids {
		s.wait(id, spool.StateCompleted)
	}
	if r := s.wait(perm.ID, spool.StateDead); r.Reason != spool.ReasonPermanent {
		t.Errorf("declined card: %+v, want dead with reason permanent", r)
	}
	if h := s.deadLetter(spool.High, "card.charge").Header; h.Get(spool.HeaderTaskID) != perm.ID {
		t.Errorf("dead letter of %s: %v", perm.ID, h)
	}
	// Weighted across the partitions: critical tasks start, on average,
	// well before idle ones.
	mu.Lock()
	rank := map[spool.Priority][]int{}
	for i, p := range order {
		rank[p] = append(rank[p], i)
	}
	mu.Unlock()
	if c, i := mean(rank[spool.Critical]), mean(rank[spool.Idle]); c >= i {
		t.Errorf("mean start position: critical %.1f, idle %.1f; want critical first", c, i)
	}

	// Tasks of paused types, whatever their partition, are parked in
	// SPOOL_TASKS by the worker and, once resumed, go back
	// through the mapping and complete.
	adm, err := admin.New(env.Connect(t))
	if err != nil {
		t.Fatal(err)
	}
	var paused []string
	for i := range 12 {
		typ := "part.t" + strconv.Itoa(i)
		if _, err := adm.PauseType(streamstest.Context(t), typ, admin.TypePauseOptions{}); err != nil {
			t.Fatal(err)
		}
		paused = append(paused, s.enqueue(producer.NewTask(typ, nil)).ID)
	}
	streamstest.WaitFor(t, 20*time.Second, func() error {
		info, err := s.env.Stream(t, s.names.TaskStream()).Info(streamstest.Context(t), jetstream.WithSubjectFilter(s.names.ParkedFilter()))
		if err != nil {
			return err
		}
		if info.State.Msgs < uint64(len(paused)) {
			return fmt.Errorf("%d tasks parked, want %d", info.State.Msgs, len(paused))
		}
		return nil
	})
	for i := range 12 {
		if err := adm.ResumeType(streamstest.Context(t), "part.t"+strconv.Itoa(i)); err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range paused {
		s.wait(id, spool.StateCompleted)
	}

	// Partition 1's leader steps down; tasks of every partition still
	// complete.
	if err := stepDown(t, env, s.names.PartitionStream(1)); err != nil {
		t.Fatal(err)
	}
	var after []string
	for i := range 12 {
		after = append(after, s.enqueue(producer.NewTask("part.t"+strconv.Itoa(i), nil)).ID)
	}
	for _, id := range after {
		s.wait(id, spool.StateCompleted)
	}
	for k := range partitions {
		streamstest.WaitFor(t, 10*time.Second, func() error {
			if n := s.queued(k); n != 0 {
				return fmt.Errorf("partition %d holds %d tasks", k, n)
			}
			return nil
		})
	}
}

// enqueueOutsidePartition0 enqueues normal tasks of types <stem>.<i>
// until one lands in a partition after the first (the mapping hashes the
// subject), and returns its id, type and partition.
func (s *stack) enqueueOutsidePartition0(stem string) (string, string, int) {
	s.t.Helper()
	for i := range 30 {
		typ := stem + "." + strconv.Itoa(i)
		res := s.enqueue(producer.NewTask(typ, []byte("body")))
		k := s.partitionOf(res)
		if k > 0 {
			return res.ID, typ, k
		}
		// In partition 0: take it out of the way.
		if err := s.env.Stream(s.t, s.names.TaskStream()).DeleteMsg(streamstest.Context(s.t), res.Sequence); err != nil {
			s.t.Fatal(err)
		}
	}
	s.t.Fatalf("no %s task landed outside partition 0", stem)
	return "", "", 0
}

// partitionOf is the partition a task was stored in. A read may be served
// by a replica that has not stored the task yet (direct get), so it is
// tried again until one partition shows it.
func (s *stack) partitionOf(res producer.EnqueueResult) int {
	s.t.Helper()
	found := -1
	streamstest.WaitFor(s.t, 10*time.Second, func() error {
		var errs []error
		for k := range partitions {
			m, err := s.env.Stream(s.t, s.names.PartitionStream(k)).GetMsg(streamstest.Context(s.t), res.Sequence)
			if err == nil && (m.Header.Get(spool.HeaderTaskID) == res.ID || m.Header.Get(spool.HeaderMsgID) == res.ID) {
				found = k
				return nil
			}
			errs = append(errs, err)
		}
		return fmt.Errorf("task %s (seq %d) in no partition: %w", res.ID, res.Sequence, errors.Join(errs...))
	})
	return found
}

// queued is the number of messages in partition k's stream.
func (s *stack) queued(k int) uint64 {
	s.t.Helper()
	info, err := s.env.Stream(s.t, s.names.PartitionStream(k)).Info(streamstest.Context(s.t))
	if err != nil {
		s.t.Fatal(err)
	}
	return info.State.Msgs
}

func mean(v []int) float64 {
	if len(v) == 0 {
		return 0
	}
	sum := 0
	for _, x := range v {
		sum += x
	}
	return float64(sum) / float64(len(v))
}

// stepDown asks a stream's leader to step down.
func stepDown(t *testing.T, env *streamstest.Env, stream string) error {
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	_, err := env.NC.RequestWithContext(ctx, "$JS.API.STREAM.LEADER.STEPDOWN."+stream, nil)
	return err
}
