package consumer_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/spoolq/spool/consumer"
	spool "github.com/spoolq/spool/shared"
	"github.com/spoolq/spool/shared/limits"
	"github.com/spoolq/spool/streams"
	"github.com/spoolq/spool/streams/admin"
	"github.com/spoolq/spool/streams/embedded"
	"github.com/spoolq/spool/streams/streamstest"
)

// newPartitionedEnv starts one embedded server whose subject mapping
// spreads task publishes over k partitions, and provisions a topology of k
// partitions.
func newPartitionedEnv(t testing.TB, k int, s streams.Settings) *env {
	t.Helper()
	src, dst := spool.DefaultNames().PartitionMapping(k)
	srv, err := embedded.Start(embedded.Options{StoreDir: t.TempDir(), Mappings: map[string]string{src: dst}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Shutdown(); srv.WaitForShutdown() })
	s.Partitions = k
	return provisionEnv(t, srv.ClientURL(), s)
}

// typeIn returns a task type <stem>.<i> whose tasks of priority p the
// mapping sends to partition k: it publishes a probe per candidate, reads
// the stream that stored it and deletes it.
func (e *env) typeIn(stem string, p spool.Priority, k int) string {
	e.t.Helper()
	for i := range 100 {
		typ := stem + "." + itoa(i)
		subject, err := e.names.TaskSubject(p, typ)
		if err != nil {
			e.t.Fatal(err)
		}
		ack, err := e.js.Publish(testCtx(e.t), subject, nil)
		if err != nil {
			e.t.Fatal(err)
		}
		s, err := e.js.Stream(testCtx(e.t), ack.Stream)
		if err != nil {
			e.t.Fatal(err)
		}
		if err := s.DeleteMsg(testCtx(e.t), ack.Sequence); err != nil {
			e.t.Fatal(err)
		}
		if ack.Stream == e.names.PartitionStream(k) {
			return typ
		}
	}
	e.t.Fatalf("no type %s.<i> of %s lands in partition %d", stem, p, k)
	return ""
}

// A worker pinned to a partition (WithPartition) drains that partition
// only; a worker with the default pulls every partition and drains the
// rest, its backlog in Stats the sum of the partitions'.
func TestWorkerPullsEveryPartition(t *testing.T) {
	t.Parallel()
	const k = 3
	e := newPartitionedEnv(t, k, streams.Settings{Consumers: streams.ConsumersByPriority})
	var types [k]string
	for part := range k {
		types[part] = e.typeIn("spread", spool.Normal, part)
	}
	const per = 40
	var ran sync.Map // task id → partition of its type
	mux := consumer.NewMux()
	for part, typ := range types {
		mux.HandleFunc(typ, func(ctx context.Context, task *consumer.Task) ([]byte, error) {
			if _, dup := ran.LoadOrStore(task.ID, part); dup {
				t.Errorf("task %s ran twice", task.ID)
			}
			return nil, nil
		})
	}
	for part, typ := range types {
		for i := range per {
			e.publishID(spool.Normal, typ, fmt.Sprintf("p%d-%d", part, i), nil, nil)
		}
	}
	for part := range k {
		if n := e.partitionMsgs(part); n != per {
			t.Fatalf("partition %d holds %d tasks, want %d", part, n, per)
		}
	}

	pinned := e.worker(mux, consumer.WithPartition(1), consumer.WithWorkerName("pinned"))
	for i := range per {
		e.waitResult(fmt.Sprintf("p1-%d", i), spool.StateCompleted, 10*time.Second)
	}
	if err := pinned.Stop(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	for _, part := range []int{0, 2} {
		if n := e.partitionMsgs(part); n != per {
			t.Fatalf("the worker pinned to partition 1 touched partition %d: %d tasks left, want %d", part, n, per)
		}
	}

	// Held until the worker has read its backlog, so Stats shows it.
	gate := make(chan struct{})
	hold := consumer.HandlerFunc(func(ctx context.Context, task *consumer.Task) ([]byte, error) {
		<-gate
		return mux.ProcessTask(ctx, task)
	})
	w := e.worker(hold, consumer.WithConcurrency(1, 1))
	streamstest.WaitFor(t, 10*time.Second, func() error {
		if b := w.Stats().Priorities[spool.Normal].Backlog; b != 2*per-1 {
			return fmt.Errorf("normal backlog %d, want %d (two partitions, one task running)", b, 2*per-1)
		}
		return nil
	})
	close(gate)
	for _, part := range []int{0, 2} {
		for i := range per {
			e.waitResult(fmt.Sprintf("p%d-%d", part, i), spool.StateCompleted, 20*time.Second)
		}
	}
	// The worker acks a task after writing its result, so the last acks
	// may still be on their way when the results show.
	streamstest.WaitFor(t, 10*time.Second, func() error {
		for part := range k {
			if n := e.partitionMsgs(part); n != 0 {
				return fmt.Errorf("partition %d holds %d tasks after the drain", part, n)
			}
		}
		return nil
	})
	count := 0
	ran.Range(func(any, any) bool { count++; return true })
	if count != k*per {
		t.Errorf("%d tasks ran, want %d", count, k*per)
	}
}

// The weights hold across partitions: with each priority's tasks in a
// partition of their own, so that workers per partition would give every
// partition the same share, one worker gives every priority its weight
// share of the tasks started (within 3 percentage points over 480 tasks).
func TestWeightedSharesAcrossPartitions(t *testing.T) {
	t.Parallel()
	const k = 3
	e := newPartitionedEnv(t, k, streams.Settings{Consumers: streams.ConsumersByPriority})
	const perPriority = 400
	const window = 480 // every priority stays non-empty: critical needs 200 of its 400
	var order log[spool.Priority]
	mux := consumer.NewMux()
	for _, p := range spool.Priorities {
		typ := e.typeIn("work-"+p.String(), p, int(p)%k) // critical and low in 0, high and idle in 1, normal in 2
		mux.HandleFunc(typ, func(ctx context.Context, task *consumer.Task) ([]byte, error) {
			order.add(task.Priority)
			return nil, nil
		})
		for i := range perPriority {
			h := nats.Header{}
			h.Set(spool.HeaderTaskID, fmt.Sprintf("%s-%d", p, i))
			subject, err := e.names.TaskSubject(p, typ)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := e.js.PublishMsgAsync(&nats.Msg{Subject: subject, Header: h}); err != nil {
				t.Fatal(err)
			}
		}
	}
	select {
	case <-e.js.PublishAsyncComplete():
	case <-time.After(30 * time.Second):
		t.Fatal("publishing timed out")
	}
	for part := range k {
		if n := e.partitionMsgs(part); n == 0 {
			t.Fatalf("partition %d holds no task", part)
		}
	}
	e.worker(mux, consumer.WithConcurrency(4, 4), consumer.WithBoost())
	streamstest.WaitFor(t, 30*time.Second, func() error {
		if order.len() < window {
			return errors.New("window")
		}
		return nil
	})
	wantShares(t, order.snapshot()[:window], 0.03)
}

// The boost sees the oldest waiting task of a priority in any partition:
// an idle task aged past the boost step in a partition other than the
// critical flood's runs within a few tasks.
func TestBoostAcrossPartitions(t *testing.T) {
	t.Parallel()
	e := newPartitionedEnv(t, 2, streams.Settings{})
	idleType := e.typeIn("old", spool.Idle, 1)
	critType := e.typeIn("flood", spool.Critical, 0)
	idleSeq := e.publishID(spool.Idle, idleType, "old-idle", nil, nil)
	for i := range 300 {
		e.publishID(spool.Critical, critType, "crit-"+itoa(i), nil, nil)
	}
	tasks, err := e.js.Stream(testCtx(t), e.names.PartitionStream(1))
	if err != nil {
		t.Fatal(err)
	}
	idleMsg, err := tasks.GetMsg(testCtx(t), idleSeq)
	if err != nil {
		t.Fatal(err)
	}
	frozen := idleMsg.Time.Add(time.Minute) // the idle task is a minute old, every critical one younger
	gate := make(chan struct{})
	var first atomic.Bool
	var order log[spool.Priority]
	mux := consumer.NewMux()
	h := func(ctx context.Context, task *consumer.Task) ([]byte, error) {
		if first.CompareAndSwap(false, true) {
			<-gate // hold the only slot while the worker reads the ages
		}
		order.add(task.Priority)
		return nil, nil
	}
	mux.HandleFunc(idleType, h)
	mux.HandleFunc(critType, h)
	weights := consumer.DefaultWeights()
	weights[spool.Idle] = 0.0001
	w := e.worker(mux, consumer.WithConcurrency(1, 1), consumer.WithWeights(weights),
		consumer.WithBoost(consumer.BoostStep{After: time.Minute, Factor: 10000}),
		consumer.WithClock(func() time.Time { return frozen }))
	streamstest.WaitFor(t, 10*time.Second, func() error {
		s := w.Stats()
		if !(s.Busy == 1 && s.Priorities[spool.Idle].Boost == 10000 && s.Priorities[spool.Critical].Boost == 1) {
			return errors.New("idle boost seen")
		}
		return nil
	})
	close(gate)
	e.waitResult("old-idle", spool.StateCompleted, 30*time.Second)
	wantBoosted(t, order.snapshot())
}

// Ordered keys keep their order on a partitioned topology: the held
// subjects are in SPOOL_TASKS, a released task goes back through the
// mapping to a partition after the first, and two workers (one pulling
// every partition, one pinned to that partition) run each key's tasks one
// at a time in enqueue order. Tasks parked before any worker ran (no kick
// heard) are started by the workers' sweep of held keys.
func TestOrderedKeysAcrossPartitions(t *testing.T) {
	t.Parallel()
	const k = 3
	e := newPartitionedEnv(t, k, streams.Settings{})
	typ := e.typeIn("ord", spool.Normal, 2)
	e.putRule(limits.Rule{Type: typ, Ordered: limits.OrderHold})
	turns, err := limits.NewTurns(testCtx(t), e.js, e.names)
	if err != nil {
		t.Fatal(err)
	}
	const keys, per = 3, 10
	for i := range per {
		for key := range keys {
			e.parkOrdered(turns, typ, fmt.Sprintf("k%d", key), fmt.Sprintf("ord-%d-%d", key, i), []byte(strconv.Itoa(i)))
		}
	}
	log := newOrderLog()
	mux := consumer.NewMux()
	mux.HandleFunc(typ, func(ctx context.Context, task *consumer.Task) ([]byte, error) {
		key := task.Headers.Get(spool.HeaderKey)
		i, _ := strconv.Atoi(string(task.Payload))
		log.start(key, i)
		log.end(key, i, true)
		return nil, nil
	})
	e.worker(mux, consumer.WithConcurrency(4, 4), consumer.WithWorkerName("all"))
	e.worker(mux, consumer.WithConcurrency(4, 4), consumer.WithWorkerName("pinned"), consumer.WithPartition(2))
	for key := range keys {
		for i := range per {
			e.waitResult(fmt.Sprintf("ord-%d-%d", key, i), spool.StateCompleted, 30*time.Second)
		}
	}
	log.mu.Lock()
	defer log.mu.Unlock()
	if len(log.overlap) > 0 {
		t.Errorf("tasks of one key overlapped: %v", log.overlap)
	}
	for key := range keys {
		got := log.finished[fmt.Sprintf("k%d", key)]
		for i := range per {
			if i >= len(got) || got[i] != i {
				t.Errorf("key k%d finished in order %v, want 0..%d", key, got, per-1)
				break
			}
		}
	}
}

// A paused priority is paused on every partition: one worker pulling all
// of them runs none of its tasks while the other priorities run, and
// every one on its first delivery after the resume. A task cancelled
// while queued in a partition after the first never runs. A paused type's
// tasks of every partition are parked in SPOOL_TASKS and run after the
// resume.
func TestPauseAndCancelAcrossPartitions(t *testing.T) {
	t.Parallel()
	const k = 3
	e := newPartitionedEnv(t, k, streams.Settings{Consumers: streams.ConsumersByPriority})
	ctx := testCtx(t)
	adm, err := admin.New(e.connect(), admin.WithLogger(testLogger(t)))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := adm.PausePriority(ctx, spool.Normal, time.Time{}); err != nil {
		t.Fatal(err)
	}
	var normal, high [k]string
	for part := range k {
		normal[part] = e.typeIn("n", spool.Normal, part)
		high[part] = e.typeIn("h", spool.High, part)
	}
	var pausedRan, cancelledRan atomic.Int32
	var paused atomic.Bool
	paused.Store(true)
	mux := consumer.NewMux()
	for part := range k {
		mux.HandleFunc(normal[part], func(ctx context.Context, task *consumer.Task) ([]byte, error) {
			if paused.Load() {
				pausedRan.Add(1)
			}
			if task.ID == "cancelled" {
				cancelledRan.Add(1)
			}
			return nil, nil
		})
		mux.HandleFunc(high[part], func(ctx context.Context, task *consumer.Task) ([]byte, error) { return nil, nil })
	}
	const per = 5
	for part := range k {
		for i := range per {
			e.publishID(spool.Normal, normal[part], fmt.Sprintf("n%d-%d", part, i), nil, nil)
			e.publishID(spool.High, high[part], fmt.Sprintf("h%d-%d", part, i), nil, nil)
		}
	}
	e.cancel("cancelled", "ops", "obsolete")
	e.publishID(spool.Normal, normal[1], "cancelled", nil, nil)
	e.worker(mux, consumer.WithConcurrency(2, 4))
	for part := range k {
		for i := range per {
			e.waitResult(fmt.Sprintf("h%d-%d", part, i), spool.StateCompleted, 10*time.Second)
		}
	}
	st, err := adm.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if ps := st.Priorities[spool.Normal]; !ps.Paused || ps.Pending != k*per+1 {
		t.Fatalf("normal while paused: %+v, want paused with %d pending", ps, k*per+1)
	}
	if n := pausedRan.Load(); n != 0 {
		t.Fatalf("%d normal tasks ran while paused", n)
	}
	paused.Store(false)
	if err := adm.ResumePriority(ctx, spool.Normal); err != nil {
		t.Fatal(err)
	}
	for part := range k {
		for i := range per {
			if doc := e.waitResult(fmt.Sprintf("n%d-%d", part, i), spool.StateCompleted, 20*time.Second); doc.Attempts != 1 {
				t.Errorf("task n%d-%d completed on attempt %d", part, i, doc.Attempts)
			}
		}
	}
	e.waitResult("cancelled", spool.StateCancelled, 10*time.Second)
	if n := cancelledRan.Load(); n != 0 {
		t.Errorf("the cancelled task ran %d times", n)
	}

	// A paused type: its tasks in every partition are parked, then run.
	for part := range k {
		if _, err := adm.PauseType(ctx, normal[part], admin.TypePauseOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	paused.Store(true)
	for part := range k {
		e.publishID(spool.Normal, normal[part], fmt.Sprintf("t%d", part), nil, nil)
	}
	streamstest.WaitFor(t, 20*time.Second, func() error {
		s, err := e.js.Stream(ctx, e.names.TaskStream())
		if err != nil {
			return err
		}
		info, err := s.Info(ctx, jetstream.WithSubjectFilter(e.names.ParkedFilter()))
		if err != nil {
			return err
		}
		if info.State.Msgs < k {
			return fmt.Errorf("%d tasks parked in %s, want %d", info.State.Msgs, e.names.TaskStream(), k)
		}
		return nil
	})
	if n := pausedRan.Load(); n != 0 {
		t.Fatalf("%d tasks of a paused type ran", n)
	}
	paused.Store(false)
	for part := range k {
		if err := adm.ResumeType(ctx, normal[part]); err != nil {
			t.Fatal(err)
		}
	}
	for part := range k {
		e.waitResult(fmt.Sprintf("t%d", part), spool.StateCompleted, 20*time.Second)
	}
}
