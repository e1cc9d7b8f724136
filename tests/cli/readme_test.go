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
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spoolq/spool/streams"
	"github.com/spoolq/spool/streams/streamstest"
	"github.com/spoolq/spool/tests/devstack"
)

// docPages are the Markdown files whose shell blocks TestREADME runs, in
// the order it runs them against one stack: the README first, then the
// guides, the dead letters last since its blocks replay and purge them.
// A guide page not listed here runs after the listed ones but before the
// dead letters, in name order.
var docPages = []string{
	"README.md",
	"docs/guide/enqueueing.md",
	"docs/guide/controls.md",
	"docs/guide/workers.md",
	"docs/guide/remote-handlers.md",
	"docs/guide/workflows.md",
	"docs/guide/flow-control.md",
	"docs/guide/metrics.md",
	"docs/guide/configuration.md",
	"docs/guide/dead-letters.md",
}

// recipesPage holds the wire contract's `nats` recipes: a raw worker pulling
// and settling tasks by hand, pauses, cancellations. TestREADME does not run
// them against its shared stack, where they would take the worker's tasks;
// tests/natscli runs them on stacks of their own with their effects
// asserted.
const recipesPage = "docs/guide/clients.md"

// envBlock is the first line of the README's block that points a terminal
// at the dev stack. TestREADME runs it, with the stack's addresses, and
// gives every later command the environment it exports.
const envBlock = `export SPOOL_NATS_URL=nats://127.0.0.1:4222 NATS_URL=nats://127.0.0.1:4222 \`

// readmeExcluded lists the shell blocks that TestREADME does not run, by
// their first line, with the reason. A listed block that is no longer in
// any page fails the test, so the list cannot go stale either.
var readmeExcluded = map[string]string{
	"make run    # the dev stack in the foreground, Ctrl-C stops it":                "starts a stack in the foreground and runs the whole test suite; the test runs against a stack of its own",
	"export SPOOL_NATS_URL=nats://127.0.0.1:4333 NATS_URL=nats://127.0.0.1:4333 \\": "starts a second stack in the foreground; testdata/dev.txtar moves a stack the same way",
	"cd examples/node && npm ci": "runs background services and needs Node.js and npm; tests/nodeexample runs the same fleet",
	"go get github.com/spoolq/spool/producer@v0.1.0 github.com/spoolq/spool/consumer@v0.1.0":                                  "adds the modules to the reader's own module and talks to no stack; make release-check resolves them",
	"spool-dev --worker=false &                                  # a stack with no worker (stop make run first)":              "starts a stack of its own and background services, and needs Node.js and npm; tests/nodeexample runs the same fleet",
	"SPOOL_REMOTE_ROUTES='billing.>=spool.remote.billing;concurrency=8;timeout=30s,img.*=spool.remote.{type}' spool-consumer": "runs a consumer until stopped; the routes are tested in consumer/remote and spool-consumer's configuration tests",
	"SPOOL_CONSUMERS=type spool-admin provision    # removes the priority consumers":                                          "switches the stack's workers to pulling by type and runs a consumer until stopped; tests/faults TestTypeFleet runs both commands on a stack of its own",
	"spool-producer load --count 100000 --mix critical=1,high=2,normal=4 --size 256   # load generator":                       "runs until stopped (serve) or for 100,000 tasks (load); producer's tests cover both",
}

// readmeCommand is one command of a shell block, with the output the page
// shows for it, if any.
type readmeCommand struct {
	line int    // in the page
	text string // continuation lines joined
	want string // a JSON object, "..." or "…" standing for the rest
}

// readmeBlock is one ```sh block of a page.
type readmeBlock struct {
	file     string
	line     int
	first    string
	commands []readmeCommand
}

// TestREADME runs every shell block of the README and the guides that
// talks to a running stack, page by page in docPages order, against one
// dev stack (worker, broker, metrics), once where workers pull by priority
// and once where they pull by type, since the pages must hold for both. The README's environment block runs
// first, with the stack's addresses, and every later command gets what it
// exports (the binaries this test built come first on PATH). Each command
// must exit 0, must not print one of the broker's error documents, must
// print the JSON the page shows under it (the fields shown; a value ending
// in "…" is a prefix), and a nats command must print the stream names its
// comment promises. A command is retried for a few seconds, since a result
// appears once a worker ran the task.
func TestREADME(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{streams.ConsumersByPriority, streams.ConsumersByType} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			testREADME(t, streams.Settings{Consumers: mode})
		})
	}
}

// testREADME runs the pages against a dev stack provisioned with settings.
func testREADME(t *testing.T, settings streams.Settings) {
	root := repoRoot(t)
	natsBin := filepath.Join(root, "bin", "nats")
	if _, err := os.Stat(natsBin); err != nil {
		t.Fatalf("the nats CLI is not built (%v): run `make tools` (make test does it first)", err)
	}
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Fatalf("the README's blocks run in bash: %v", err)
	}
	var blocks []readmeBlock
	for _, page := range pagesInOrder(t, root) {
		blocks = append(blocks, readmeBlocks(t, root, page)...)
	}

	ctx, cancel := context.WithTimeout(t.Context(), 4*time.Minute)
	defer cancel()
	st, err := devstack.Start(ctx, devstack.Options{
		StoreDir:    t.TempDir(),
		Logger:      slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn})),
		Settings:    settings,
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
		"localhost:8080", broker,
		"127.0.0.1:8080", broker,
		"127.0.0.1:9090", metrics,
		"nats://127.0.0.1:4222", st.URL,
	)
	work := t.TempDir()
	env := stackEnv(ctx, t, bash, root, blocks, rewrite)
	env = append(env, "HOME="+work, "NATS_CONTEXT=", "NO_COLOR=1", "TOKEN=")

	seen := map[string]bool{}
	ran := 0
	for _, b := range blocks {
		if b.first == envBlock {
			continue
		}
		if reason, ok := readmeExcluded[b.first]; ok {
			seen[b.first] = true
			t.Logf("%s:%d: not run: %s", b.file, b.line, reason)
			continue
		}
		for _, c := range b.commands {
			ran++
			cmd := rewrite.Replace(c.text)
			start := time.Now()
			streamstest.WaitFor(t, 20*time.Second, func() error {
				if err := runReadmeCommand(ctx, bash, work, env, cmd, c.want); err != nil {
					return fmt.Errorf("%s:%d: %s\n%w", b.file, c.line, c.text, err)
				}
				return nil
			})
			if took := time.Since(start); took > 2*time.Second {
				t.Logf("%s:%d took %s", b.file, c.line, took.Round(time.Millisecond))
			}
		}
	}
	for first := range readmeExcluded {
		if !seen[first] {
			t.Errorf("readmeExcluded lists a block no page has any more: %q", first)
		}
	}
	if ran < 60 {
		t.Errorf("ran %d commands of the README and the guides; the extraction lost some", ran)
	}
}

// pagesInOrder is docPages, with any other page of docs/guide but the
// recipes page inserted before the dead letters' page; a listed page that
// is missing fails.
func pagesInOrder(t *testing.T, root string) []string {
	t.Helper()
	for _, p := range docPages {
		if _, err := os.Stat(filepath.Join(root, p)); err != nil {
			t.Fatalf("docPages lists %s: %v", p, err)
		}
	}
	found, err := filepath.Glob(filepath.Join(root, "docs", "guide", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	last := len(docPages) - 1
	pages := slices.Clone(docPages[:last])
	for _, f := range found {
		rel, err := filepath.Rel(root, f)
		if err != nil {
			t.Fatal(err)
		}
		if rel = filepath.ToSlash(rel); !slices.Contains(docPages, rel) && rel != recipesPage {
			pages = append(pages, rel)
		}
	}
	return append(pages, docPages[last])
}

// stackEnv runs the README's environment block, rewritten to the stack's
// addresses, in the repository root, and returns the variables it exports,
// with the test's binaries first on PATH. It fails unless the block puts
// the repository's bin/ on PATH and points SPOOL_NATS_URL and NATS_URL at
// the stack.
func stackEnv(ctx context.Context, t *testing.T, bash, root string, blocks []readmeBlock, rewrite *strings.Replacer) []string {
	t.Helper()
	i := slices.IndexFunc(blocks, func(b readmeBlock) bool { return b.first == envBlock })
	if i < 0 || blocks[i].file != "README.md" || len(blocks[i].commands) != 1 {
		t.Fatalf("README.md has no block of one command starting %q", envBlock)
	}
	b := blocks[i]
	c := exec.CommandContext(ctx, bash, "-c", rewrite.Replace(b.commands[0].text)+"\nenv -0")
	c.Dir, c.Env = root, []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir()}
	out, err := c.Output()
	if err != nil {
		t.Fatalf("README.md:%d: the environment block fails: %v", b.line, err)
	}
	vars := map[string]string{}
	for kv := range strings.SplitSeq(strings.TrimSuffix(string(out), "\x00"), "\x00") {
		if k, v, ok := strings.Cut(kv, "="); ok {
			vars[k] = v
		}
	}
	rewritten := rewrite.Replace("nats://127.0.0.1:4222")
	for _, k := range []string{"SPOOL_NATS_URL", "NATS_URL"} {
		if vars[k] != rewritten {
			t.Fatalf("README.md:%d: the environment block sets %s=%q, want the stack's %s", b.line, k, vars[k], rewritten)
		}
	}
	if first, _, _ := strings.Cut(vars["PATH"], string(os.PathListSeparator)); first != filepath.Join(root, "bin") {
		t.Fatalf("README.md:%d: the environment block's PATH starts %q, want the repository's bin/", b.line, first)
	}
	env := []string{"PATH=" + binDir + string(os.PathListSeparator) + vars["PATH"]}
	for k, v := range vars {
		if strings.HasPrefix(k, "SPOOL_") || k == "NATS_URL" {
			env = append(env, k+"="+v)
		}
	}
	return env
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

// readmeBlocks extracts the ```sh blocks of page, a path relative to root.
func readmeBlocks(t *testing.T, root, page string) []readmeBlock {
	t.Helper()
	f, err := os.Open(filepath.Join(root, page))
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
			cur = &readmeBlock{file: page, line: n}
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
		t.Fatalf("%s:%d: a shell block is not closed", page, cur.line)
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
