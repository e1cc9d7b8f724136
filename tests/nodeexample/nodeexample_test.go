package nodeexample

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spoolq/spool/consumer"
	"github.com/spoolq/spool/consumer/demo"
	"github.com/spoolq/spool/consumer/remote"
	"github.com/spoolq/spool/producer"
	spool "github.com/spoolq/spool/shared"
	"github.com/spoolq/spool/streams"
	"github.com/spoolq/spool/streams/streamstest"
)

// repoRoot is two levels above this package.
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// nodeExample returns the node binary and examples/node, failing with an
// install hint when node or the npm packages are missing.
func nodeExample(t *testing.T) (node, dir string) {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatal("node is not installed: install Node.js 20 or newer (make deps says how), then run make examples")
	}
	dir = filepath.Join(repoRoot(t), "examples", "node")
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "@nats-io", "transport-node")); err != nil {
		t.Fatalf("the example's npm packages are not installed: run `npm ci` in examples/node (%v)", err)
	}
	return node, dir
}

// natsCLI returns bin/nats, failing with a hint when it is not built.
func natsCLI(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(repoRoot(t), "bin", "nats")
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("the nats CLI is not built (%v): run `make tools` (make test does it first)", err)
	}
	return bin
}

// service starts a long-running process with the extra environment env,
// returns once a line of its output (stderr when fromStderr, else stdout)
// contains ready, and interrupts it when the test ends.
func service(t *testing.T, env []string, ready string, fromStderr bool, name string, args ...string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = repoRoot(t)
	cmd.Env = append(append(os.Environ(), "HOME="+t.TempDir(), "NATS_CONTEXT=", "NO_COLOR=1"), env...)
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	cmd.WaitDelay = 5 * time.Second
	var logs streamstest.SyncBuffer
	var out io.ReadCloser
	var err error
	if fromStderr {
		cmd.Stdout = &logs
		out, err = cmd.StderrPipe()
	} else {
		cmd.Stderr = &logs
		out, err = cmd.StdoutPipe()
	}
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		cancel()
		t.Fatalf("starting %s: %v", name, err)
	}
	up, scanned := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(scanned)
		sc := bufio.NewScanner(out)
		for signalled := false; sc.Scan(); {
			fmt.Fprintln(&logs, sc.Text())
			if !signalled && strings.Contains(sc.Text(), ready) {
				signalled = true
				close(up)
			}
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-scanned
		_ = cmd.Wait() // an interrupted process exits non-zero
		t.Logf("%s output:\n%s", filepath.Base(name), logs.String())
	})
	select {
	case <-up:
	case <-scanned:
		t.Fatalf("%s exited before it was ready:\n%s", name, logs.String())
	case <-time.After(30 * time.Second):
		t.Fatalf("%s not ready within 30s:\n%s", name, logs.String())
	}
}

// allBytes is every byte value once; invalidUTF8 is not UTF-8.
var (
	allBytes = func() []byte {
		b := make([]byte, 256)
		for i := range b {
			b[i] = byte(i)
		}
		return b
	}()
	invalidUTF8 = []byte{0x68, 0x69, 0xff, 0xfe, 0xc3, 0x28, 0x00}
)

// nodeReport is what producer.js prints.
type nodeReport struct {
	OK     bool            `json:"ok"`
	Error  string          `json:"error"`
	Checks map[string]bool `json:"checks"`
	Tasks  []struct {
		ID             string `json:"id"`
		Type           string `json:"type"`
		State          string `json:"state"`
		Worker         string `json:"worker"`
		ResultEncoding string `json:"result_encoding"`
		OutputBase64   string `json:"output_base64"`
		Identical      bool   `json:"identical"`
	} `json:"tasks"`
	Dead struct {
		ID     string `json:"id"`
		State  string `json:"state"`
		Reason string `json:"reason"`
		Letter struct {
			TaskID  string `json:"taskId"`
			Reason  string `json:"reason"`
			Error   string `json:"error"`
			Payload string `json:"payload"`
		} `json:"letter"`
		OK bool `json:"ok"`
	} `json:"dead"`
}

// TestNodeAndShell runs the cross-language round trips against one server
// and one Go worker that serves the demo handlers itself and routes node.*
// and sh.* to the Node and shell handlers, as `spool-consumer --demo` does
// with SPOOL_REMOTE_ROUTES="node.>=spool.remote.{type},sh.>=spool.remote.{type}".
func TestNodeAndShell(t *testing.T) {
	node, dir := nodeExample(t)
	nats := natsCLI(t)
	e := streamstest.Start(t, streams.Settings{})
	ctx := streamstest.Context(t)

	service(t, []string{"NATS_URL=" + e.URL}, `"ready":true`, false, node, filepath.Join(dir, "handler.js"))
	service(t, nil, "Listening on", true, nats, "-s", e.URL, "reply", "spool.remote.sh.>", "--command", "sh examples/shell/upper.sh")

	mux := consumer.NewMux()
	demo.Register(mux) // demo.echo returns the payload, as spool-consumer --demo does
	routes, err := remote.NewRoutes(e.NC, []remote.Route{
		{Pattern: "node.>", Subject: "spool.remote.{type}", Concurrency: 4, Timeout: 10 * time.Second},
		{Pattern: "sh.>", Subject: "spool.remote.{type}"},
	}, streamstest.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	w, err := consumer.New(e.Connect(t), remote.Fallback(mux, routes), consumer.WithLogger(streamstest.Logger(t)),
		consumer.WithRetry(10*time.Millisecond, 50*time.Millisecond, 3), consumer.WithWorkerName("go-worker"))
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stopCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := w.Stop(stopCtx); err != nil {
			t.Error(err)
		}
	})
	client, err := producer.New(e.NC, producer.WithLogger(streamstest.Logger(t)))
	if err != nil {
		t.Fatal(err)
	}

	t.Run("Go to Node and shell", func(t *testing.T) {
		echo := append(append([]byte{}, invalidUTF8...), allBytes...)
		cases := []struct {
			typ          string
			payload      []byte
			state        spool.State
			want         []byte
			wantAttempts int
		}{
			{"node.echo", echo, spool.StateCompleted, echo, 1},
			{"node.bytes", nil, spool.StateCompleted, allBytes, 1},
			{"node.flaky", nil, spool.StateCompleted, []byte(`{"attempt":2,"by":"node"}`), 2},
			{"node.fail", []byte(`{}`), spool.StateDead, nil, 1},
			{"sh.upper", []byte("hello, shell"), spool.StateCompleted, []byte("HELLO, SHELL"), 1},
		}
		for _, c := range cases {
			enq, err := client.Enqueue(ctx, producer.Task{Type: c.typ, Payload: c.payload, ID: "go-" + strings.ReplaceAll(c.typ, ".", "-")})
			if err != nil {
				t.Fatal(err)
			}
			res, err := client.Wait(ctx, enq.ID)
			if err != nil {
				t.Fatalf("%s: %v", c.typ, err)
			}
			out, err := res.Output()
			if err != nil || res.State != c.state || !bytes.Equal(out, c.want) || res.Attempts != c.wantAttempts {
				t.Errorf("%s: %s after %d attempts, output %q, %v; want %s after %d, %q (document %+v)",
					c.typ, res.State, res.Attempts, out, err, c.state, c.wantAttempts, c.want, res)
			}
			if c.state == spool.StateDead && (res.Reason != spool.ReasonPermanent || !strings.Contains(res.Error, "node refuses this task")) {
				t.Errorf("%s: reason %s, error %q", c.typ, res.Reason, res.Error)
			}
		}
	})

	t.Run("Node to Go", func(t *testing.T) {
		cmd := exec.CommandContext(ctx, node, filepath.Join(dir, "producer.js"))
		cmd.Env = append(os.Environ(), "NATS_URL="+e.URL, "SPOOL_EXAMPLE_RUN=t1")
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		stdout, err := cmd.Output()
		var rep nodeReport
		if jerr := json.Unmarshal(stdout, &rep); jerr != nil {
			t.Fatalf("producer.js: %v, %v\nstdout: %s\nstderr: %s", err, jerr, stdout, stderr.String())
		}
		if err != nil || !rep.OK || rep.Error != "" {
			t.Errorf("producer.js failed: %v\n%s\n%s", err, stdout, stderr.String())
		}
		want := map[string][]byte{"demo.echo": append(append([]byte{}, invalidUTF8...), allBytes...), "node.bytes": allBytes}
		if len(rep.Tasks) != len(want) {
			t.Fatalf("producer.js reported %d tasks: %s", len(rep.Tasks), stdout)
		}
		for _, task := range rep.Tasks {
			// What Node read back...
			got, err := base64.StdEncoding.DecodeString(task.OutputBase64)
			if err != nil || !task.Identical || !bytes.Equal(got, want[task.Type]) || task.Worker != "go-worker" || task.ResultEncoding != "base64" || task.State != "completed" {
				t.Errorf("node read %s: %+v", task.Type, task)
			}
			// ... is what Go reads back.
			res, err := client.Result(ctx, task.ID)
			if err != nil {
				t.Fatal(err)
			}
			if out, err := res.Output(); err != nil || !bytes.Equal(out, want[task.Type]) {
				t.Errorf("go read %s: %q, %v", task.ID, out, err)
			}
		}
		for _, name := range []string{"dead letters listed", "delayed: scheduled before it fires", "delayed: runs after its time",
			"unique: a second task is refused", "unique: free again after completion", "cancel: a delayed task", "cancel: a completed task is finished"} {
			if ok, found := rep.Checks[name]; !ok || !found {
				t.Errorf("producer.js check %q: %v (reported %v)", name, ok, found)
			}
		}
		d := rep.Dead
		if !d.OK || d.State != "dead" || d.Reason != "permanent" || d.Letter.TaskID != d.ID || d.Letter.Reason != "permanent" ||
			!strings.Contains(d.Letter.Error, "node refuses this task") || d.Letter.Payload != `{"why":"to see a dead letter"}` {
			t.Errorf("dead letter as node read it: %+v", d)
		}
	})
}
