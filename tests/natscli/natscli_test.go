package natscli_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/spoolq/spool/consumer"
	spool "github.com/spoolq/spool/shared"
	"github.com/spoolq/spool/streams/streamstest"
	"github.com/spoolq/spool/tests/devstack"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// natsBin finds bin/nats at the repository root (the folder holding go.work).
func natsBin(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.work")); err == nil {
			break
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.work above the test directory")
		}
		dir = parent
	}
	bin := filepath.Join(dir, "bin", "nats")
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("the nats CLI is not built (%v): run `make tools` (make test does it first)", err)
	}
	return bin
}

// nats runs the CLI against url and returns its standard output.
func nats(t *testing.T, ctx context.Context, bin, url string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.CommandContext(ctx, bin, append([]string{"-s", url}, args...)...)
	// A HOME of its own keeps the CLI away from any saved contexts.
	cmd.Env = append(os.Environ(), "HOME="+t.TempDir(), "NATS_CONTEXT=", "NO_COLOR=1")
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("nats %s: %w: %s", strings.Join(args, " "), err, errOut.String())
	}
	return out.String(), nil
}

// natsTTY runs the CLI under a pseudo-terminal (util-linux script), for the
// commands that page interactively, such as `nats stream view`.
func natsTTY(t *testing.T, ctx context.Context, bin, url string, args ...string) (string, error) {
	t.Helper()
	script, err := exec.LookPath("script")
	if err != nil {
		t.Fatalf("`nats stream view` needs a terminal; util-linux script provides one (make deps says how): %v", err)
	}
	line := bin + " -s " + url + " " + strings.Join(args, " ")
	cmd := exec.CommandContext(ctx, script, "-qec", line, "/dev/null")
	cmd.Env = append(os.Environ(), "HOME="+t.TempDir(), "NATS_CONTEXT=", "NO_COLOR=1", "TERM=dumb")
	var out, errOut bytes.Buffer
	cmd.Stdin = strings.NewReader("")
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("%s: %w: %s%s", line, err, out.String(), errOut.String())
	}
	return out.String(), nil
}

// TestNATSCLI runs the guides' commands with the real nats CLI: a raw task
// published with headers completes and `nats kv get` reads its result; a
// failing task is found in SPOOL_DLQ with `nats stream view`; `nats micro`
// lists the worker; `nats stream ls` and `nats kv ls` show the topology.
func TestNATSCLI(t *testing.T) {
	t.Parallel()
	bin := natsBin(t)
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()
	st, err := devstack.Start(ctx, devstack.Options{
		StoreDir:      t.TempDir(),
		Logger:        slog.New(slog.NewTextHandler(t.Output(), nil)),
		Worker:        true,
		WorkerOptions: []consumer.Option{consumer.WithRetry(20*time.Millisecond, 100*time.Millisecond, 3)},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Stop)

	out, err := nats(t, ctx, bin, st.URL, "stream", "ls", "--names")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"SPOOL_TASKS", "SPOOL_DLQ", "SPOOL_ADVISORIES"} {
		if !strings.Contains(out, want) {
			t.Errorf("nats stream ls lacks %s:\n%s", want, out)
		}
	}
	out, err = nats(t, ctx, bin, st.URL, "kv", "ls", "--names")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"spool_results", "spool_unique"} {
		if !strings.Contains(out, want) {
			t.Errorf("nats kv ls lacks %s:\n%s", want, out)
		}
	}

	// A raw task with headers, published by the CLI (JetStream ack awaited).
	if _, err := nats(t, ctx, bin, st.URL, "pub", "spool.tasks.high.demo.echo", `{"hello":"cli"}`,
		"-H", "Spool-Task-Id:cli-1", "-H", "Nats-Msg-Id:cli-1", "-H", "Spool-Max-Retries:5", "--jetstream"); err != nil {
		t.Fatal(err)
	}
	var res spool.Result
	streamstest.WaitFor(t, 30*time.Second, func() error {
		out, err := nats(t, ctx, bin, st.URL, "kv", "get", "spool_results", "cli-1", "--raw")
		if err != nil {
			return err
		}
		if err := json.Unmarshal([]byte(strings.TrimSpace(out)), &res); err != nil {
			return fmt.Errorf("kv get printed %q: %w", out, err)
		}
		if res.State != spool.StateCompleted {
			return fmt.Errorf("state %s", res.State)
		}
		return nil
	})
	if string(res.Result) != `{"hello":"cli"}` || res.Priority != spool.High {
		t.Fatalf("result document %+v", res)
	}

	// A failing task lands in the DLQ; nats stream view shows it with its reason.
	if _, err := nats(t, ctx, bin, st.URL, "pub", "spool.tasks.low.demo.fail", `{"fail_times":3}`,
		"-H", "Spool-Task-Id:cli-fail", "-H", "Spool-Max-Retries:0", "--jetstream"); err != nil {
		t.Fatal(err)
	}
	streamstest.WaitFor(t, 30*time.Second, func() error {
		out, err := natsTTY(t, ctx, bin, st.URL, "stream", "view", "SPOOL_DLQ", "--subject", "spool.dlq.low.demo.fail")
		if err != nil {
			return err
		}
		for _, want := range []string{"Spool-Reason: error", "Spool-Task-Id: cli-fail", "Spool-Original-Subject: spool.tasks.low.demo.fail"} {
			if !strings.Contains(out, want) {
				return fmt.Errorf("stream view lacks %q:\n%s", want, out)
			}
		}
		return nil
	})

	// The worker registered on the NATS service API.
	streamstest.WaitFor(t, 30*time.Second, func() error {
		out, err := nats(t, ctx, bin, st.URL, "micro", "stats", "spool-consumer", "--json")
		if err != nil {
			return err
		}
		if !strings.Contains(out, `"worker": "spool-dev-worker"`) {
			return fmt.Errorf("micro stats lacks the worker:\n%s", out)
		}
		return nil
	})
	out, err = nats(t, ctx, bin, st.URL, "micro", "stats", "spool-consumer")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("nats micro stats spool-consumer:\n%s", out)
}
