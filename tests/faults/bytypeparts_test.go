package faults_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/spoolq/spool/producer"
	spool "github.com/spoolq/spool/shared"
	"github.com/spoolq/spool/streams/streamstest"
	"github.com/spoolq/spool/tests/checker"
)

// fleetEnqueuer enqueues the type fleet's tasks and records them.
type fleetEnqueuer struct {
	t      *testing.T
	ctx    context.Context
	client *producer.Client
	chk    *checker.Checker
	typeOf map[string]string // id → type
	prio   map[string]spool.Priority
}

// add enqueues one task of typ at priority p whose handler sleeps sleepMS.
func (e *fleetEnqueuer) add(batch, typ string, p spool.Priority, i, sleepMS int) {
	e.t.Helper()
	id := fmt.Sprintf("%s-%s-%s-%d", batch, strings.ReplaceAll(typ, ".", "-"), p, i)
	tk, value := newTask(e.t, id, p, faultTask{SleepMS: sleepMS})
	tk.Type = typ
	if _, err := e.client.Enqueue(e.ctx, tk); err != nil {
		e.t.Fatalf("enqueueing %s: %v", id, err)
	}
	e.chk.Enqueued(id, value)
	e.typeOf[id] = typ
	e.prio[id] = p
}

// ids returns the ids enqueued that keep passes (nil: all), sorted.
func (e *fleetEnqueuer) ids(keep func(id string, p spool.Priority) bool) []string {
	var out []string
	for id := range e.typeOf {
		if keep == nil || keep(id, e.prio[id]) {
			out = append(out, id)
		}
	}
	slices.Sort(out)
	return out
}

// runFleetTask is the work of the remote handler and the raw worker: it
// records the execution, sleeps as the payload says and returns the value
// as a JSON string, as spool-faultworker's fault.task does.
func runFleetTask(ctx context.Context, chk *checker.Checker, id, worker string, payload []byte, attempt int) ([]byte, error) {
	var p faultTask
	if err := json.Unmarshal(payload, &p); err != nil {
		return nil, fmt.Errorf("task %s: payload: %w", id, err)
	}
	chk.Executed(id, checker.Execution{Value: p.V, Worker: worker, Attempt: attempt})
	select {
	case <-time.After(time.Duration(p.SleepMS) * time.Millisecond): // the task's own work
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return json.Marshal(p.V)
}

// remoteHandler answers spool-consumer's requests for img.* types.
type remoteHandler struct {
	chk      *checker.Checker
	mu       sync.Mutex
	inFlight map[string]int // task id → requests being answered
	wg       sync.WaitGroup
}

func (h *remoteHandler) handle(m *nats.Msg) {
	id := m.Header.Get("Spool-Task-Id")
	attempt, _ := strconv.Atoi(m.Header.Get("Spool-Attempt"))
	h.mu.Lock()
	h.inFlight[id]++
	h.mu.Unlock()
	h.wg.Go(func() {
		defer func() {
			h.mu.Lock()
			h.inFlight[id]--
			h.mu.Unlock()
		}()
		reply := nats.NewMsg(m.Reply)
		out, err := runFleetTask(context.Background(), h.chk, id, fleetRemoteWho, m.Data, attempt)
		if err != nil {
			reply.Header.Set("Spool-Error", err.Error())
		}
		reply.Data = out
		_ = m.RespondMsg(reply) // the worker may be gone: it was killed
	})
}

// running counts the requests being answered of tasks whose id starts with
// prefix.
func (h *remoteHandler) running(prefix string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for id, k := range h.inFlight {
		if strings.HasPrefix(id, prefix) {
			n += k
		}
	}
	return n
}

func (h *remoteHandler) wait() { h.wg.Wait() }

// binStack is a scenario's server with the Spool binaries built, a
// connection to it and spool-admin bound to it: the start of the
// scenarios that run the binaries as a fleet.
type binStack struct {
	srv   *serverHandle
	nc    *nats.Conn
	js    jetstream.JetStream
	ctx   context.Context
	start time.Time
}

// startBinStack builds the binaries, starts a server and connects as name;
// the scenario's context ends after d.
func startBinStack(t *testing.T, name string, d time.Duration) *binStack {
	t.Helper()
	if err := spoolBinaries(); err != nil {
		t.Fatal(err)
	}
	s := &binStack{start: time.Now()}
	s.srv = startServer(t, t.TempDir(), 0, false)
	s.nc = connect(t, s.srv.url, name)
	var err error
	if s.js, err = jetstream.New(s.nc); err != nil {
		t.Fatal(err)
	}
	s.ctx = ctxFor(t, d)
	return s
}

// admin runs spool-admin against the stack with the extra environment.
func (s *binStack) admin(t *testing.T, env []string, args ...string) []byte {
	t.Helper()
	return spoolAdmin(t, s.ctx, s.srv.url, env, args...)
}

// spoolAdmin runs the spool-admin binary against url with the scenario's
// settings and extra environment, and returns what it printed; it fails
// the test when the command fails.
func spoolAdmin(t *testing.T, ctx context.Context, url string, env []string, args ...string) []byte {
	t.Helper()
	cmd := exec.CommandContext(ctx, filepath.Join(binDir, "spool-admin"), args...)
	cmd.Env = append(os.Environ(), "SPOOL_NATS_URL="+url, "SPOOL_ACK_WAIT="+ackWait.String(), "SPOOL_DUPLICATE_WINDOW=2m")
	cmd.Env = append(cmd.Env, env...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("spool-admin %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return out
}

// fleetStatusDoc is the part of `spool-admin status --json` the scenario
// reads.
type fleetStatusDoc struct {
	Consumers string `json:"consumers"`
	Unserved  []struct {
		Type     string `json:"type"`
		Priority string `json:"priority"`
		Queued   int    `json:"queued"`
	} `json:"unserved"`
}

func fleetStatus(t *testing.T, out []byte) fleetStatusDoc {
	t.Helper()
	var st fleetStatusDoc
	if err := json.Unmarshal(out, &st); err != nil {
		t.Fatalf("spool-admin status --json: %v\n%s", err, out)
	}
	return st
}

// waitConsumer waits for the consumer of priority p and type pattern,
// named as the contract spells it, and returns its info.
func waitConsumer(t *testing.T, js jetstream.JetStream, p spool.Priority, pattern string) *jetstream.ConsumerInfo {
	t.Helper()
	name := names.Consumer(p) + "-" + rawEscapes.Replace(pattern)
	var info *jetstream.ConsumerInfo
	streamstest.WaitFor(t, time.Minute, func() error {
		c, err := js.Consumer(t.Context(), names.TaskStream(), name)
		if err != nil {
			return fmt.Errorf("consumer %s: %w", name, err)
		}
		info = c.CachedInfo()
		return nil
	})
	return info
}

// waitPaused waits until the low consumer of pattern is paused: one made
// while low is paused joins the pause as soon as it is made.
func waitPaused(t *testing.T, js jetstream.JetStream, pattern string) {
	t.Helper()
	name := waitConsumer(t, js, spool.Low, pattern).Name
	streamstest.WaitFor(t, 10*time.Second, func() error {
		c, err := js.Consumer(t.Context(), names.TaskStream(), name)
		if err != nil {
			return err
		}
		if !c.CachedInfo().Paused {
			return fmt.Errorf("consumer %s is not paused while low is", name)
		}
		return nil
	})
}

// resultOf reads the result document of id.
func resultOf(t *testing.T, ctx context.Context, kv jetstream.KeyValue, id string) spool.Result {
	t.Helper()
	e, err := kv.Get(ctx, id)
	if err != nil {
		t.Fatalf("result of %s: %v", id, err)
	}
	var doc spool.Result
	if err := json.Unmarshal(e.Value(), &doc); err != nil {
		t.Fatalf("result of %s: %v", id, err)
	}
	return doc
}

// terminal returns the ids among ids whose result document is terminal.
func terminal(t *testing.T, js jetstream.JetStream, ids []string) []string {
	t.Helper()
	kv, err := js.KeyValue(t.Context(), names.ResultsBucket())
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, id := range ids {
		e, err := kv.Get(t.Context(), id)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			continue
		}
		if err != nil {
			t.Fatalf("result of %s: %v", id, err)
		}
		var doc spool.Result
		if err := json.Unmarshal(e.Value(), &doc); err != nil {
			t.Fatalf("result of %s: %v", id, err)
		}
		if doc.State.Terminal() {
			out = append(out, id)
		}
	}
	return out
}

// waitTerminal waits until every task of ids has a terminal result.
func waitTerminal(t *testing.T, js jetstream.JetStream, ids []string, timeout time.Duration) {
	t.Helper()
	left := slices.Clone(ids)
	streamstest.WaitFor(t, timeout, func() error {
		done := terminal(t, js, left)
		left = slices.DeleteFunc(left, func(id string) bool { return slices.Contains(done, id) })
		if len(left) > 0 {
			return fmt.Errorf("%d of %d tasks not finished: %v", len(left), len(ids), left[:min(len(left), 10)])
		}
		return nil
	})
}

// checkFleetLimit checks from the span log that fault.limited never ran
// more than its limit at once, across both Go workers.
func checkFleetLimit(t *testing.T, spanLog string, killedAt map[string]time.Time) {
	t.Helper()
	spans, _ := readSpans(t, spanLog)
	byType, err := checker.MaxConcurrent(spans, killedAt, ofType("fault.limited"))
	if err != nil {
		t.Fatal(err)
	}
	o := byType["fault.limited"]
	t.Logf("fault.limited: %d runs, most at once %d (limit %d)", len(spans), o.Max, fleetLimit)
	if o.Max > fleetLimit {
		t.Errorf("fault.limited ran %d at once at %s, limit %d", o.Max, o.At.Format(time.RFC3339Nano), fleetLimit)
	}
}
