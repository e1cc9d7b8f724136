package consumer_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/spoolq/spool/consumer"
	spool "github.com/spoolq/spool/shared"
	"github.com/spoolq/spool/shared/limits"
	"github.com/spoolq/spool/streams"
	"github.com/spoolq/spool/streams/streamstest"
)

// newTurnsEnv starts an environment with rule in force, and the turns to
// park tasks with.
func newTurnsEnv(t *testing.T, rule limits.Rule) (*env, *limits.Turns) {
	t.Helper()
	e := newEnv(t, streams.Settings{})
	e.putRule(rule)
	turns, err := limits.NewTurns(testCtx(t), e.js, e.names)
	if err != nil {
		t.Fatal(err)
	}
	return e, turns
}

// parkOrdered enqueues task id of typ with key the way a producer does for
// an ordered type: on the key's held subject (limits.Turns.Park).
func (e *env) parkOrdered(turns *limits.Turns, typ, key, id string, payload []byte) {
	e.t.Helper()
	subject, err := e.names.TaskSubject(spool.Normal, typ)
	if err != nil {
		e.t.Fatal(err)
	}
	h := nats.Header{}
	h.Set(spool.HeaderMsgID, id)
	h.Set(spool.HeaderKey, key)
	if _, err := turns.Park(testCtx(e.t), typ, key, 1, subject, "", &nats.Msg{Header: h, Data: payload}); err != nil {
		e.t.Fatal(err)
	}
}

// orderLog records, per key, the task indexes in the order their
// attempts start and complete, and whether two of a key ever overlapped.
type orderLog struct {
	mu       sync.Mutex
	running  map[string]int
	overlap  []string
	started  map[string][]int
	finished map[string][]int
}

func newOrderLog() *orderLog {
	return &orderLog{running: map[string]int{}, started: map[string][]int{}, finished: map[string][]int{}}
}

func (l *orderLog) start(key string, i int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.running[key]++
	if l.running[key] > 1 {
		l.overlap = append(l.overlap, fmt.Sprintf("%s/%d", key, i))
	}
	l.started[key] = append(l.started[key], i)
}

func (l *orderLog) end(key string, i int, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.running[key]--
	if ok {
		l.finished[key] = append(l.finished[key], i)
	}
}

// With "hold", the tasks of a key run one at a time in enqueue order across
// three workers; a task that fails keeps its key's turn through its retry
// (nothing after it starts before it completes), and a task dead-lettered
// passes the turn on.
func TestOrderedKeysHold(t *testing.T) {
	t.Parallel()
	e, turns := newTurnsEnv(t, limits.Rule{Type: "ord", Ordered: limits.OrderHold})
	log := newOrderLog()
	mux := consumer.NewMux()
	mux.HandleFunc("ord", func(ctx context.Context, task *consumer.Task) ([]byte, error) {
		key := task.Headers.Get(spool.HeaderKey)
		i, _ := strconv.Atoi(string(task.Payload))
		log.start(key, i)
		var err error
		switch {
		case key == "k1" && i == 3 && task.Attempt == 1:
			err = errors.New("first attempt fails")
		case key == "k2" && i == 5:
			err = consumer.Permanent(errors.New("always fails"))
		}
		log.end(key, i, err == nil)
		return nil, err
	})
	for i := range 3 {
		e.worker(mux, consumer.WithConcurrency(5, 5), consumer.WithWorkerName(fmt.Sprintf("w%d", i)),
			consumer.WithRetry(50*time.Millisecond, 50*time.Millisecond, 3))
	}
	const keys, per = 4, 12
	for i := range per {
		for k := range keys {
			e.parkOrdered(turns, "ord", fmt.Sprintf("k%d", k), fmt.Sprintf("ord-%d-%d", k, i), []byte(strconv.Itoa(i)))
		}
	}
	for k := range keys {
		for i := range per {
			want := spool.StateCompleted
			if k == 2 && i == 5 {
				want = spool.StateDead
			}
			e.waitResult(fmt.Sprintf("ord-%d-%d", k, i), want, time.Minute)
		}
	}
	log.mu.Lock()
	defer log.mu.Unlock()
	if len(log.overlap) > 0 {
		t.Errorf("tasks of one key ran at once: %v", log.overlap)
	}
	for k := range keys {
		key := fmt.Sprintf("k%d", k)
		want := make([]int, 0, per)
		for i := range per {
			if k != 2 || i != 5 {
				want = append(want, i)
			}
		}
		if got := log.finished[key]; !slices.Equal(got, want) {
			t.Errorf("key %s completed in order %v, want %v", key, got, want)
		}
	}
	// k1's task 3 failed once and held the key: its retry started before
	// task 4 did.
	if got, want := log.started["k1"][:6], []int{0, 1, 2, 3, 3, 4}; !slices.Equal(got, want) {
		t.Errorf("key k1 started %v, want %v (task 3 retried before task 4 ran)", got, want)
	}
}

// With "skip", a task that fails passes its key's turn on: the tasks after
// it run while it waits for its retry (which here waits for the last of
// them), and it completes last.
func TestOrderedKeysSkip(t *testing.T) {
	t.Parallel()
	e, turns := newTurnsEnv(t, limits.Rule{Type: "ords", Ordered: limits.OrderSkip})
	log := newOrderLog()
	lastDone := make(chan struct{})
	const per = 6
	mux := consumer.NewMux()
	mux.HandleFunc("ords", func(ctx context.Context, task *consumer.Task) ([]byte, error) {
		i, _ := strconv.Atoi(string(task.Payload))
		log.start("k", i)
		if i == 1 {
			if task.Attempt == 1 {
				log.end("k", i, false)
				return nil, errors.New("first attempt fails")
			}
			// Under "hold" this would wait forever: the tasks after it
			// could not run before it completes.
			select {
			case <-lastDone:
			case <-ctx.Done():
				log.end("k", i, false)
				return nil, ctx.Err()
			}
		}
		log.end("k", i, true)
		if i == per-1 {
			close(lastDone)
		}
		return nil, nil
	})
	for i := range 2 {
		e.worker(mux, consumer.WithConcurrency(4, 4), consumer.WithWorkerName(fmt.Sprintf("w%d", i)),
			consumer.WithRetry(50*time.Millisecond, 50*time.Millisecond, 3), consumer.WithTaskTimeout(time.Minute))
	}
	for i := range per {
		e.parkOrdered(turns, "ords", "k", fmt.Sprintf("ords-%d", i), []byte(strconv.Itoa(i)))
	}
	for i := range per {
		e.waitResult(fmt.Sprintf("ords-%d", i), spool.StateCompleted, time.Minute)
	}
	log.mu.Lock()
	defer log.mu.Unlock()
	if got, want := log.finished["k"], []int{0, 2, 3, 4, 5, 1}; !slices.Equal(got, want) {
		t.Errorf("completed in order %v, want %v", got, want)
	}
}

// A task of an ordered type that reaches its task subject directly (a
// plain NATS publish) is parked by the worker that receives it and runs in
// its key's order from there; one without a key runs unordered.
func TestOrderedKeysParkedByWorker(t *testing.T) {
	t.Parallel()
	e := newEnv(t, streams.Settings{})
	e.putRule(limits.Rule{Type: "ordw", Ordered: limits.OrderHold})
	log := newOrderLog()
	mux := consumer.NewMux()
	mux.HandleFunc("ordw", func(ctx context.Context, task *consumer.Task) ([]byte, error) {
		i, _ := strconv.Atoi(string(task.Payload))
		key := task.Headers.Get(spool.HeaderKey)
		log.start(key, i)
		log.end(key, i, true)
		return nil, nil
	})
	// One slot: the worker sees the tasks in stream order, so it parks
	// them in that order.
	e.worker(mux, consumer.WithConcurrency(1, 1))
	const n = 10
	for i := range n {
		h := nats.Header{}
		h.Set(spool.HeaderTaskID, fmt.Sprintf("ordw-%d", i))
		h.Set(spool.HeaderKey, "k")
		e.publish(spool.Normal, "ordw", []byte(strconv.Itoa(i)), h)
	}
	e.publishID(spool.Normal, "ordw", "ordw-nokey", []byte("99"), nil)
	for i := range n {
		e.waitResult(fmt.Sprintf("ordw-%d", i), spool.StateCompleted, time.Minute)
	}
	e.waitResult("ordw-nokey", spool.StateCompleted, time.Minute)
	log.mu.Lock()
	defer log.mu.Unlock()
	if got := log.finished["k"]; !slices.Equal(got, []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}) {
		t.Errorf("completed in order %v", got)
	}
}

// Tasks parked by a producer whose kick request no worker heard (none
// ran) are started by the workers' sweep of held keys once a worker runs,
// in order.
func TestOrderedKeysStartedBySweep(t *testing.T) {
	t.Parallel()
	e := newEnv(t, streams.Settings{})
	e.putRule(limits.Rule{Type: "ords", Ordered: limits.OrderHold})
	subject, err := e.names.TaskSubject(spool.Normal, "ords")
	if err != nil {
		t.Fatal(err)
	}
	const n = 5
	for i := range n {
		m := &nats.Msg{Subject: subject, Header: nats.Header{}, Data: []byte(strconv.Itoa(i))}
		m.Header.Set(spool.HeaderMsgID, fmt.Sprintf("ords-%d", i))
		m.Header.Set(spool.HeaderKey, "k")
		limits.Hold(e.names, "ords", "k", m)
		if _, err := e.js.PublishMsg(testCtx(t), m); err != nil {
			t.Fatal(err)
		}
	}
	log := newOrderLog()
	mux := consumer.NewMux()
	mux.HandleFunc("ords", func(ctx context.Context, task *consumer.Task) ([]byte, error) {
		i, _ := strconv.Atoi(string(task.Payload))
		log.start("k", i)
		log.end("k", i, true)
		return nil, nil
	})
	e.worker(mux)
	for i := range n {
		e.waitResult(fmt.Sprintf("ords-%d", i), spool.StateCompleted, time.Minute)
	}
	log.mu.Lock()
	defer log.mu.Unlock()
	if got := log.finished["k"]; !slices.Equal(got, []int{0, 1, 2, 3, 4}) || len(log.overlap) > 0 {
		t.Errorf("completed in order %v, overlapping %v", got, log.overlap)
	}
}

// With "fair", a key with a deep backlog queued first does not starve the
// keys queued after it: each key has at most its window of tasks queued
// or running, so the 99 small keys all complete while the big key has
// done only a small part of its backlog (make test scale, window 1;
// spool-bench -scenarios fairness runs 100,000 against 99×100).
func TestFairKeys(t *testing.T) {
	t.Parallel()
	e, turns := newTurnsEnv(t, limits.Rule{Type: "fair", Fair: &limits.Fair{Window: 1}})
	const big, small, per = 1_000, 99, 3
	var mu sync.Mutex
	done := map[string]int{}
	var order []string // the key of each completion, in order
	mux := consumer.NewMux()
	mux.HandleFunc("fair", func(ctx context.Context, task *consumer.Task) ([]byte, error) {
		key := task.Headers.Get(spool.HeaderKey)
		mu.Lock()
		done[key]++
		order = append(order, key)
		mu.Unlock()
		return nil, nil
	})
	for i := range 2 {
		e.worker(mux, consumer.WithConcurrency(20, 20), consumer.WithWorkerName(fmt.Sprintf("w%d", i)))
	}
	// Parked the way EnqueueBatch parks them: the big key's backlog
	// first, then the small keys', then each key started once.
	subject, err := e.names.TaskSubject(spool.Normal, "fair")
	if err != nil {
		t.Fatal(err)
	}
	ctx := testCtx(t)
	park := func(key string, n int) {
		for i := range n {
			h := nats.Header{}
			h.Set(spool.HeaderMsgID, fmt.Sprintf("%s-%d", key, i))
			h.Set(spool.HeaderKey, key)
			m := &nats.Msg{Subject: subject, Header: h}
			turns.Hold("fair", key, m)
			if _, err := e.js.PublishMsgAsync(m); err != nil {
				t.Fatal(err)
			}
		}
	}
	park("big", big)
	keys := []string{"big"}
	for k := range small {
		key := fmt.Sprintf("small-%02d", k)
		park(key, per)
		keys = append(keys, key)
	}
	select {
	case <-e.js.PublishAsyncComplete():
	case <-ctx.Done():
		t.Fatal("parking the tasks did not complete")
	}
	for _, k := range keys {
		if err := turns.Kick(testCtx(t), "fair", k, 1); err != nil {
			t.Fatal(err)
		}
	}
	streamstest.WaitFor(t, 4*time.Minute, func() error {
		mu.Lock()
		defer mu.Unlock()
		if n := len(order); n < big+small*per {
			return fmt.Errorf("%d of %d tasks done", n, big+small*per)
		}
		return nil
	})
	mu.Lock()
	defer mu.Unlock()
	// When the last small key completed, how much of the big key's
	// backlog had run?
	lastSmall, bigThen := 0, 0
	for i, k := range order {
		if k != "big" {
			lastSmall = i
		}
	}
	for _, k := range order[:lastSmall+1] {
		if k == "big" {
			bigThen++
		}
	}
	for _, k := range keys {
		want := per
		if k == "big" {
			want = big
		}
		if done[k] != want {
			t.Errorf("key %s ran %d tasks, want %d", k, done[k], want)
		}
	}
	t.Logf("the last small key completed at task %d of %d; the big key had run %d of its %d by then", lastSmall+1, len(order), bigThen, big)
	if bigThen > big/4 {
		t.Errorf("the big key ran %d of its %d tasks before the last small key completed: the small keys waited behind it", bigThen, big)
	}
}
