package cli

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/spoolq/spool/streams"
	"github.com/spoolq/spool/streams/streamstest"
	"github.com/spoolq/spool/tests/devstack"
)

// readmeExcluded lists the README's shell blocks that TestREADME does not
// run, by their first line, with the reason. A listed block that is no
// longer in the README fails the test, so the list cannot go stale either.
var readmeExcluded = map[string]string{
	"make run    # the dev stack in the foreground, Ctrl-C stops it":                                                          "starts a stack in the foreground and runs the whole test suite; the test runs against a stack of its own",
	"export SPOOL_NATS_URL=nats://127.0.0.1:4333 SPOOL_HTTP_ADDR=127.0.0.1:8181 \\":                                           "starts a second stack in the foreground; testdata/dev.txtar moves a stack the same way",
	"go get github.com/spoolq/spool/producer@v0.1.0 github.com/spoolq/spool/consumer@v0.1.0":                                  "adds the modules to the reader's own module and talks to no stack; make release-check resolves them",
	"go run ./tests/cmd/spool-dev --worker=false                 # server and broker on 127.0.0.1, no worker":                 "starts a stack of its own and background services, and needs Node.js and npm; tests/nodeexample runs the same fleet",
	"SPOOL_REMOTE_ROUTES='billing.>=spool.remote.billing;concurrency=8;timeout=30s,img.*=spool.remote.{type}' spool-consumer": "runs a consumer until stopped; the routes are tested in consumer/remote and spool-consumer's configuration tests",
	"SPOOL_CONSUMERS=type go run ./streams/cmd/spool-admin provision    # removes the priority consumers":                     "switches the stack's workers to pulling by type and runs a consumer until stopped; tests/faults TestTypeFleet runs both commands on a stack of its own",
	"spool-producer load --count 100000 --mix critical=1,high=2,normal=4 --size 256   # load generator":                       "runs until stopped (serve) or for 100,000 tasks (load); producer's tests cover both",
}

// readmeCommand is one command of a shell block, with the output the README
// shows for it, if any.
type readmeCommand struct {
	line int    // in README.md
	text string // continuation lines joined
	want string // a JSON object, "..." or "…" standing for the rest
}

// readmeBlock is one ```sh block.
type readmeBlock struct {
	line     int
	first    string
	commands []readmeCommand
}

// TestREADME runs every shell block of README.md that talks to a running
// stack, in order, against one dev stack (worker, broker, metrics), with
// the binaries and bin/nats on PATH and the README's addresses rewritten
// to the stack's. Each command must exit 0, must not print one of the
// broker's error documents, must print the JSON the README shows under it
// (the fields shown; a value ending in "…" is a prefix), and a nats
// command must print the stream names its comment promises. A
// command is retried for a few seconds, since a result appears once a
// worker ran the task.
func TestREADME(t *testing.T) {
	t.Parallel()
	root := repoRoot(t)
	natsBin := filepath.Join(root, "bin", "nats")
	if _, err := os.Stat(natsBin); err != nil {
		t.Fatalf("the nats CLI is not built (%v): run `make tools` (make test does it first)", err)
	}
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Fatalf("the README's blocks run in bash: %v", err)
	}
	blocks := readmeBlocks(t, filepath.Join(root, "README.md"))

	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	// By priority: the README's CLI and library examples enqueue types no
	// demo handler serves (email.send, report.build) and read their
	// results, which exist only where such a task is dead-lettered
	// no_handler; pulling by type, the default, it waits unserved.
	st, err := devstack.Start(ctx, devstack.Options{
		Settings:    streams.Settings{Consumers: streams.ConsumersByPriority},
		StoreDir:    t.TempDir(),
		Logger:      slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn})),
		Worker:      true,
		BrokerAddr:  "127.0.0.1:0",
		MetricsAddr: "127.0.0.1:0",
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Stop)
	broker := strings.TrimPrefix(st.BrokerURL, "http://")
	metrics := strings.TrimSuffix(strings.TrimPrefix(st.MetricsURL, "http://"), "/metrics")
	rewrite := strings.NewReplacer(
		"go run ./streams/cmd/spool-admin", "spool-admin",
		"go run ./producer/cmd/spool-producer", "spool-producer",
		"go run ./consumer/cmd/spool-consumer", "spool-consumer",
		"localhost:8080", broker,
		"127.0.0.1:8080", broker,
		"127.0.0.1:9090", metrics,
		"nats://127.0.0.1:4222", st.URL,
	)
	work := t.TempDir()
	env := []string{
		"PATH=" + binDir + string(os.PathListSeparator) + filepath.Join(root, "bin") + string(os.PathListSeparator) + os.Getenv("PATH"),
		"HOME=" + work, "NATS_CONTEXT=", "NO_COLOR=1", "TOKEN=",
		"SPOOL_NATS_URL=" + st.URL, "NATS_URL=" + st.URL,
	}

	seen := map[string]bool{}
	ran := 0
	for _, b := range blocks {
		if reason, ok := readmeExcluded[b.first]; ok {
			seen[b.first] = true
			t.Logf("README.md:%d: not run: %s", b.line, reason)
			continue
		}
		for _, c := range b.commands {
			ran++
			cmd := rewrite.Replace(c.text)
			start := time.Now()
			streamstest.WaitFor(t, 20*time.Second, func() error {
				if err := runReadmeCommand(ctx, bash, work, env, cmd, c.want); err != nil {
					return fmt.Errorf("README.md:%d: %s\n%w", c.line, c.text, err)
				}
				return nil
			})
			if took := time.Since(start); took > 2*time.Second {
				t.Logf("README.md:%d took %s", c.line, took.Round(time.Millisecond))
			}
		}
	}
	for first := range readmeExcluded {
		if !seen[first] {
			t.Errorf("readmeExcluded lists a block the README no longer has: %q", first)
		}
	}
	if ran < 30 {
		t.Errorf("ran %d README commands; the extraction lost some", ran)
	}
}

// runReadmeCommand runs cmd in bash and checks its exit status and output.
func runReadmeCommand(ctx context.Context, bash, dir string, env []string, cmd, want string) error {
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	c := exec.CommandContext(cctx, bash, "-o", "pipefail", "-c", cmd)
	c.Dir, c.Env = dir, env
	var out, errOut bytes.Buffer
	c.Stdout, c.Stderr = &out, &errOut
	if err := c.Run(); err != nil {
		return fmt.Errorf("%w\nstdout: %s\nstderr: %s", err, out.String(), errOut.String())
	}
	got := strings.TrimSpace(out.String())
	if strings.HasPrefix(got, `{"error":{`) {
		return fmt.Errorf("the broker answered an error: %s", got)
	}
	if err := matchNamedInComment(cmd, got); err != nil {
		return err
	}
	if want == "" {
		return nil
	}
	return matchDocumented(got, want)
}

// streamNames are the stream names a comment may promise ("KV_*" is any
// name with that prefix).
var streamNames = regexp.MustCompile(`\b(?:SPOOL|KV)_[A-Z_]*\*?`)

// matchNamedInComment checks that a nats command prints every stream name
// its trailing comment promises ("nats stream ls -a   # SPOOL_TASKS, ...,
// KV_*").
func matchNamedInComment(cmd, got string) error {
	if !strings.HasPrefix(cmd, "nats ") {
		return nil
	}
	_, comment, ok := strings.Cut(cmd, " # ")
	if !ok {
		return nil
	}
	for _, name := range streamNames.FindAllString(comment, -1) {
		if !strings.Contains(got, strings.TrimSuffix(name, "*")) {
			return fmt.Errorf("the output lacks %s, which the README's comment promises: %s", name, got)
		}
	}
	return nil
}

// matchDocumented checks that the JSON object got holds every field of the
// README's want, where "...}" or "…}" ends an object early and a string
// value ending in "…" is a prefix.
func matchDocumented(got, want string) error {
	w := strings.NewReplacer(",...}", "}", ",…}", "}").Replace(want)
	var wantObj, gotObj map[string]any
	if err := json.Unmarshal([]byte(w), &wantObj); err != nil {
		return fmt.Errorf("the README's output %s is not a JSON object once shortened: %w", want, err)
	}
	if err := json.Unmarshal([]byte(got), &gotObj); err != nil {
		return fmt.Errorf("output %s is not a JSON object: %w", got, err)
	}
	for k, wv := range wantObj {
		gv, ok := gotObj[k]
		if !ok {
			return fmt.Errorf("output lacks %q, which the README shows: %s", k, got)
		}
		if ws, ok := wv.(string); ok && strings.HasSuffix(ws, "…") {
			if gs, ok := gv.(string); ok && strings.HasPrefix(gs, strings.TrimSuffix(ws, "…")) {
				continue
			}
		}
		if !reflect.DeepEqual(gv, wv) {
			return fmt.Errorf("%q is %v, the README shows %v: %s", k, gv, wv, got)
		}
	}
	return nil
}

// readmeBlocks extracts the ```sh blocks of path.
func readmeBlocks(t *testing.T, path string) []readmeBlock {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var (
		blocks []readmeBlock
		cur    *readmeBlock
		cont   *readmeCommand // a command continued with a trailing backslash
		n      int
	)
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		n++
		line := sc.Text()
		trimmed := strings.TrimSpace(line)
		switch {
		case cur == nil && trimmed == "```sh":
			cur = &readmeBlock{line: n}
			continue
		case cur == nil:
			continue
		case trimmed == "```":
			blocks = append(blocks, *cur)
			cur, cont = nil, nil
			continue
		}
		if cur.first == "" {
			cur.first = line
		}
		if cont != nil {
			cont.text += "\n" + line
			if !strings.HasSuffix(line, `\`) {
				cont = nil
			}
			continue
		}
		switch {
		case trimmed == "":
		case strings.HasPrefix(trimmed, "# {"):
			if len(cur.commands) > 0 && cur.commands[len(cur.commands)-1].want == "" {
				cur.commands[len(cur.commands)-1].want = strings.TrimPrefix(trimmed, "# ")
			}
		case strings.HasPrefix(trimmed, "#"):
		default:
			cur.commands = append(cur.commands, readmeCommand{line: n, text: line})
			if strings.HasSuffix(line, `\`) {
				cont = &cur.commands[len(cur.commands)-1]
			}
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if cur != nil {
		t.Fatalf("README.md:%d: a shell block is not closed", cur.line)
	}
	if len(blocks) == 0 {
		t.Fatal("no shell blocks in README.md")
	}
	return blocks
}

// repoRoot is the folder holding go.work.
func repoRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.work")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal(errors.New("no go.work above the test directory"))
		}
		dir = parent
	}
}
