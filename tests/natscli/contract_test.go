package natscli_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	natsgo "github.com/nats-io/nats.go"

	"github.com/spoolq/spool/consumer"
	"github.com/spoolq/spool/consumer/remote"
	spool "github.com/spoolq/spool/shared"
	"github.com/spoolq/spool/streams"
	"github.com/spoolq/spool/streams/admin"
	"github.com/spoolq/spool/streams/streamstest"
)

// recipesPage holds the `nats` recipes of the contract, its worked examples.
const recipesPage = "docs/guide/clients.md"

// contractBlocks returns the ```sh blocks of the contract's recipes page,
// each as its commands: comment lines dropped, backslash continuations
// joined.
func contractBlocks(t *testing.T) [][]string {
	t.Helper()
	root := filepath.Dir(filepath.Dir(natsBin(t))) // <root>/bin/nats
	raw, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(recipesPage)))
	if err != nil {
		t.Fatal(err)
	}
	var blocks [][]string
	var cur []string
	in, pending := false, ""
	sc := bufio.NewScanner(strings.NewReader(string(raw)))
	for sc.Scan() {
		line := sc.Text()
		switch {
		case !in && line == "```sh":
			in, cur = true, nil
		case in && line == "```":
			in = false
			blocks = append(blocks, cur)
		case in:
			if pending == "" && (strings.HasPrefix(strings.TrimSpace(line), "#") || strings.TrimSpace(line) == "") {
				continue
			}
			if s, ok := strings.CutSuffix(line, `\`); ok {
				pending += s
				continue
			}
			cur = append(cur, pending+line)
			pending = ""
		}
	}
	return blocks
}

// block returns the commands of the one block holding marker.
func block(t *testing.T, blocks [][]string, marker string) []string {
	t.Helper()
	var found []string
	for _, b := range blocks {
		if strings.Contains(strings.Join(b, "\n"), marker) {
			if found != nil {
				t.Fatalf("two blocks of %s hold %q", recipesPage, marker)
			}
			found = b
		}
	}
	if found == nil {
		t.Fatalf("no block of %s holds %q", recipesPage, marker)
	}
	return found
}

// command returns the command of cmds that starts with prefix.
func command(t *testing.T, cmds []string, prefix string) string {
	t.Helper()
	for _, c := range cmds {
		if strings.HasPrefix(c, prefix) {
			return c
		}
	}
	t.Fatalf("no command starting %q in %q", prefix, cmds)
	return ""
}

// shell runs one documented command line with sh, `nats` being bin/nats on
// url, as a reader of the doc would type it.
func shell(ctx context.Context, t *testing.T, bin, url, line string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, "sh", "-c", `nats() { exec "$SPOOL_TEST_NATS" -s "$SPOOL_TEST_URL" "$@"; }; `+line)
	cmd.Env = append(os.Environ(), "HOME="+t.TempDir(), "NATS_CONTEXT=", "NO_COLOR=1",
		"SPOOL_TEST_NATS="+bin, "SPOOL_TEST_URL="+url)
	return cmd
}

// run runs line and returns its output.
func run(ctx context.Context, t *testing.T, bin, url, line string) string {
	t.Helper()
	cmd := shell(ctx, t, bin, url, line)
	cmd.Stdin = strings.NewReader("")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", line, err, out)
	}
	return string(out)
}

// background runs line (a `nats sub` of subject) until the test ends,
// collecting its output. It returns once env's server holds the
// subscription: `nats sub` prints "Subscribing on" before it subscribes, so
// an event sent right after the process starts could reach nobody.
func background(ctx context.Context, t *testing.T, env *streamstest.Env, bin, line, subject string) *streamstest.SyncBuffer {
	t.Helper()
	out := new(streamstest.SyncBuffer)
	cmd := shell(ctx, t, bin, env.URL, line)
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	streamstest.WaitFor(t, 15*time.Second, func() error {
		conns, err := env.Server.Connz(&server.ConnzOptions{Subscriptions: true, Limit: 1 << 16})
		if err != nil {
			return err
		}
		for _, c := range conns.Conns {
			if strings.HasPrefix(c.Name, "NATS CLI") && slices.Contains(c.Subs, subject) {
				return nil
			}
		}
		return fmt.Errorf("%s: no nats CLI connection subscribes to %s yet; its output:\n%s", line, subject, out.String())
	})
	return out
}

// waitOutput waits until out holds every want.
func waitOutput(t *testing.T, what string, out *streamstest.SyncBuffer, want ...string) {
	t.Helper()
	streamstest.WaitFor(t, 15*time.Second, func() error {
		s := out.String()
		for _, w := range want {
			if !strings.Contains(s, w) {
				return fmt.Errorf("%s: no %q in:\n%s", what, w, s)
			}
		}
		return nil
	})
}

// startWorker starts a worker of mux on nc, stopped when the test ends.
func startWorker(ctx context.Context, t *testing.T, nc *natsgo.Conn, mux *consumer.Mux) {
	t.Helper()
	w, err := consumer.New(nc, mux, consumer.WithLogger(streamstest.Logger(t)), consumer.WithWorkerName("contract"),
		consumer.WithPolling(100*time.Millisecond, 50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := w.Stop(context.WithoutCancel(ctx)); err != nil {
			t.Errorf("stopping the worker: %v", err)
		}
	})
}

// TestContractExamples runs the `nats` CLI examples of the contract
// for type pauses, cancel, events, progress, priority pauses and periodic
// schedules, read from the doc itself, and asserts the effect of each.
func TestContractExamples(t *testing.T) {
	t.Parallel()
	bin := natsBin(t)
	blocks := contractBlocks(t)
	// By priority: the contract's examples pause spool-normal and show a
	// task no handler serves dead-lettered, as workers pulling by priority do.
	env := streamstest.Start(t, streams.Settings{Consumers: streams.ConsumersByPriority})
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()
	url := env.URL

	// email.send is served remotely by a responder that holds each request
	// (the task runs until cancelled) and records its progress subject.
	hnc := env.Connect(t)
	var mu sync.Mutex
	progressSubj := map[string]string{}
	hsub, err := hnc.Subscribe("spool.remote.email.send", func(m *natsgo.Msg) {
		mu.Lock()
		progressSubj[m.Header.Get(spool.HeaderTaskID)] = m.Header.Get(remote.HeaderProgressSubject)
		mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = hsub.Unsubscribe() }()
	var ran sync.Map // task id → attempts run
	wnc := env.Connect(t)
	mux := consumer.NewMux()
	mux.Handle("email.send", remote.Handler(wnc, "spool.remote.email.send"))
	count := func(ctx context.Context, task *consumer.Task) ([]byte, error) {
		ran.Store(task.ID, task.Attempt)
		return nil, nil
	}
	mux.HandleFunc("report.build", count)
	mux.HandleFunc("heartbeat", count)
	startWorker(ctx, t, wnc, mux)
	publish := func(subject, id string) {
		t.Helper()
		m := natsgo.NewMsg(subject)
		m.Header.Set(spool.HeaderTaskID, id)
		m.Data = []byte(`{"to":"ada@example.com"}`)
		if _, err := env.JS.PublishMsg(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	resultOf := func(id string) (spool.Result, error) {
		kv, err := env.JS.KeyValue(ctx, env.Names.ResultsBucket())
		if err != nil {
			return spool.Result{}, err
		}
		e, err := kv.Get(ctx, id)
		if err != nil {
			return spool.Result{}, err
		}
		var doc spool.Result
		return doc, json.Unmarshal(e.Value(), &doc)
	}

	// Events: every subscription of the doc, started first.
	events := block(t, blocks, "nats sub 'spool.events.>'")
	allEvents := background(ctx, t, env, bin, command(t, events, "nats sub 'spool.events.>'"), "spool.events.>")
	oneTask := background(ctx, t, env, bin, command(t, events, "nats sub 'spool.events.*.*.welcome-ada.>'"), "spool.events.*.*.welcome-ada.>")
	deadEvents := background(ctx, t, env, bin, command(t, events, "nats sub 'spool.events.dead.>'"), "spool.events.dead.>")
	cancelCmds := block(t, blocks, "nats kv put spool_cancel welcome-ada")
	cancellations := background(ctx, t, env, bin, command(t, cancelCmds, "nats sub '$KV.spool_cancel.>'"), "$KV.spool_cancel.>")

	// Type pause: the task of the paused type is parked, not run.
	typePause := block(t, blocks, "nats kv put spool_paused email.send")
	run(ctx, t, bin, url, command(t, typePause, "nats kv put spool_paused email.send"))
	if out := run(ctx, t, bin, url, command(t, typePause, "nats kv ls spool_paused")); !strings.Contains(out, "email.send") {
		t.Fatalf("nats kv ls spool_paused lists %q", out)
	}
	adm, err := admin.New(env.Connect(t))
	if err != nil {
		t.Fatal(err)
	}
	streamstest.WaitFor(t, 10*time.Second, func() error {
		types, err := adm.Types(ctx)
		if err != nil || len(types) != 1 || !types[0].Paused {
			return fmt.Errorf("email.send not paused yet: %+v (%v)", types, err)
		}
		return nil
	})
	publish("spool.tasks.high.email.send", "welcome-ada")
	streamstest.WaitFor(t, 10*time.Second, func() error {
		out := run(ctx, t, bin, url, command(t, typePause, "nats stream subjects SPOOL_TASKS 'spool.parked.>'"))
		if !strings.Contains(out, "spool.parked.high.email.send") {
			return fmt.Errorf("nats stream subjects shows no parked task:\n%s", out)
		}
		return nil
	})
	mu.Lock()
	_, reached := progressSubj["welcome-ada"]
	mu.Unlock()
	if reached {
		t.Fatal("the task of the paused type ran")
	}
	run(ctx, t, bin, url, command(t, typePause, "nats kv del spool_paused email.send"))
	// Resumed: moved back, it runs (the responder holds it).
	streamstest.WaitFor(t, 15*time.Second, func() error {
		mu.Lock()
		defer mu.Unlock()
		if progressSubj["welcome-ada"] == "" {
			return errors.New("the resumed task has not reached its remote handler")
		}
		return nil
	})

	// Progress from the remote handler, on the documented subject.
	progress := block(t, blocks, "nats pub spool.progress.welcome-ada")
	mu.Lock()
	if got := progressSubj["welcome-ada"]; got != "spool.progress.welcome-ada" {
		t.Errorf("the remote handler was told to report progress on %q", got)
	}
	mu.Unlock()
	run(ctx, t, bin, url, command(t, progress, "nats pub spool.progress.welcome-ada"))
	streamstest.WaitFor(t, 10*time.Second, func() error {
		doc, err := resultOf("welcome-ada")
		if err != nil {
			return err
		}
		if doc.Progress == nil || doc.Progress.Percent == nil || *doc.Progress.Percent != 40 || string(doc.Progress.Value) != `{"sent":4}` {
			return fmt.Errorf("progress %+v", doc.Progress)
		}
		return nil
	})

	// Cancel: the running task ends cancelled, with who and why.
	run(ctx, t, bin, url, command(t, cancelCmds, "nats kv put spool_cancel welcome-ada"))
	waitOutput(t, "nats sub '$KV.spool_cancel.>'", cancellations, "$KV.spool_cancel.welcome-ada", `"reason":"duplicate order"`)
	streamstest.WaitFor(t, 10*time.Second, func() error {
		out := run(ctx, t, bin, url, command(t, cancelCmds, "nats kv get spool_results welcome-ada --raw"))
		var doc spool.Result
		if err := json.Unmarshal([]byte(strings.TrimSpace(out)), &doc); err != nil {
			return fmt.Errorf("kv get printed %q: %w", out, err)
		}
		if doc.State != spool.StateCancelled || doc.CancelledBy != "ada" || doc.CancelReason != "duplicate order" {
			return fmt.Errorf("welcome-ada is %s (by %q: %q)", doc.State, doc.CancelledBy, doc.CancelReason)
		}
		return nil
	})
	// A task no handler serves ends dead: a dead event.
	publish("spool.tasks.low.nobody.serves", "orphan-1")
	waitOutput(t, "nats sub 'spool.events.>'", allEvents, "spool.events.started.high.welcome-ada.email.send",
		"spool.events.progress.high.welcome-ada.email.send", "spool.events.cancelled.high.welcome-ada.email.send")
	waitOutput(t, "nats sub 'spool.events.*.*.welcome-ada.>'", oneTask, "spool.events.cancelled.high.welcome-ada.email.send")
	waitOutput(t, "nats sub 'spool.events.dead.>'", deadEvents, "spool.events.dead.low.orphan-1.nobody.serves")
	if strings.Contains(oneTask.String(), "orphan-1") {
		t.Errorf("the one-task subscription heard of another task:\n%s", oneTask.String())
	}

	// Priority pause: a normal task waits while a high one runs; resumed,
	// it runs on its first attempt.
	prioPause := block(t, blocks, "nats consumer pause SPOOL_TASKS spool-normal")
	advisories := background(ctx, t, env, bin, command(t, prioPause, "nats sub '$JS.EVENT.ADVISORY.CONSUMER.PAUSE.SPOOL_TASKS.>'"), "$JS.EVENT.ADVISORY.CONSUMER.PAUSE.SPOOL_TASKS.>")
	run(ctx, t, bin, url, command(t, prioPause, "nats consumer pause SPOOL_TASKS spool-normal"))
	if out := run(ctx, t, bin, url, command(t, prioPause, "nats consumer info SPOOL_TASKS spool-normal")); !strings.Contains(out, "Paused Until") {
		t.Errorf("nats consumer info shows no pause:\n%s", out)
	}
	waitOutput(t, "the pause advisory", advisories, "spool-normal")
	publish("spool.tasks.normal.report.build", "paused-1")
	publish("spool.tasks.high.report.build", "running-1")
	streamstest.WaitFor(t, 10*time.Second, func() error {
		if _, ok := ran.Load("running-1"); !ok {
			return errors.New("the high task has not run")
		}
		return nil
	})
	// The worker saw the pause before the high task ran (it reads the
	// consumer at each refresh), so the normal task is still queued.
	if _, ok := ran.Load("paused-1"); ok {
		t.Error("a task of the paused priority ran")
	}
	run(ctx, t, bin, url, command(t, prioPause, "nats consumer resume SPOOL_TASKS spool-normal"))
	streamstest.WaitFor(t, 10*time.Second, func() error {
		if a, ok := ran.Load("paused-1"); !ok || a != 1 {
			return fmt.Errorf("the normal task after the resume: ran %v, attempt %v", ok, a)
		}
		return nil
	})

	// Periodic: the nightly schedule is stored with its cron; the
	// heartbeat fires.
	periodic := block(t, blocks, "spool.cron.nightly-report")
	run(ctx, t, bin, url, command(t, periodic, "nats pub -J spool.cron.nightly-report"))
	run(ctx, t, bin, url, command(t, periodic, "nats pub -J spool.cron.heartbeat"))
	if out := run(ctx, t, bin, url, command(t, periodic, "nats stream subjects SPOOL_TASKS 'spool.cron.>'")); !strings.Contains(out, "spool.cron.nightly-report") || !strings.Contains(out, "spool.cron.heartbeat") {
		t.Errorf("nats stream subjects lists:\n%s", out)
	}
	if out := run(ctx, t, bin, url, command(t, periodic, "nats stream get SPOOL_TASKS --last-for spool.cron.nightly-report")); !strings.Contains(out, "0 0 3 * * *") || !strings.Contains(out, "Europe/Paris") {
		t.Errorf("nats stream get shows:\n%s", out)
	}
	streamstest.WaitFor(t, 45*time.Second, func() error {
		fired := 0
		ran.Range(func(k, _ any) bool {
			if !strings.HasPrefix(k.(string), "paused-") && !strings.HasPrefix(k.(string), "running-") {
				fired++
			}
			return true
		})
		if fired == 0 {
			return errors.New("the heartbeat schedule has not fired")
		}
		return nil
	})
	for _, name := range []string{"heartbeat", "nightly-report"} {
		if err := adm.DeleteSchedule(ctx, name); err != nil {
			t.Errorf("deleting schedule %s: %v", name, err)
		}
	}
}
