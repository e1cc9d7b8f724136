package conformancekit_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// bin holds the kit and the Go programs it proves, built once per run.
var bin string

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(suite{m})
}

type suite struct{ m *testing.M }

func (s suite) Run() int {
	dir, err := os.MkdirTemp("", "spool-conformance-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "conformancekit:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	bin = dir
	build := exec.Command("go", "build", "-o", dir+string(filepath.Separator),
		"github.com/spoolq/spool/tests/cmd/spool-conformance",
		"github.com/spoolq/spool/tests/cmd/spool-conformance/goworker",
		"github.com/spoolq/spool/tests/cmd/spool-conformance/goproducer")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "conformancekit: building the kit:", err)
		return 1
	}
	return s.m.Run()
}

// kit runs spool-conformance with args and returns its table and exit code.
func kit(t *testing.T, args ...string) (string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 8*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(bin, "spool-conformance"), args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return stdout.String(), 0
	case errors.As(err, &exit):
		t.Logf("kit stderr:\n%s", stderr.String())
		return stdout.String(), exit.ExitCode()
	default:
		t.Fatalf("running the kit: %v\n%s", err, stderr.String())
		return "", -1
	}
}

// closing matches the table's last line.
var closing = regexp.MustCompile(`(?m)^(\d+) cases: (\d+) pass, (\d+) fail, (\d+) not covered$`)

// passes runs the kit at level, its deployment pulling by consumers,
// against command and fails the test unless every case passed, but for
// those of the other pull mode and, with allowOpen, those the level has
// not written yet.
func passes(t *testing.T, level, consumers string, allowOpen bool, command ...string) {
	t.Helper()
	passesWith(t, level, consumers, allowOpen, nil, command...)
}

// passesWith is passes with more flags for the kit.
func passesWith(t *testing.T, level, consumers string, allowOpen bool, flags []string, command ...string) {
	t.Helper()
	args := append([]string{"--level", level, "--consumers", consumers}, flags...)
	out, code := kit(t, append(append(args, "--"), command...)...)
	t.Logf("spool-conformance --level %s --consumers %s:\n%s", level, consumers, out)
	writeTable(t, fmt.Sprintf("%s --consumers %s %s-- %s", level, consumers, strings.Join(append(flags, ""), " "), filepath.Base(command[len(command)-1])), out)
	m := closing.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no closing line in the kit's output (exit %d)", code)
	}
	if code != 0 || m[3] != "0" {
		t.Errorf("level %s: exit %d, %s cases failed:\n%s", level, code, m[3], failedRows(out))
	}
	if m[2] == "0" {
		t.Errorf("level %s: no case passed", level)
	}
	if open := openRows(out); !allowOpen && open != "" {
		t.Errorf("level %s: cases not covered:\n%s", level, open)
	}
}

// failedRows picks the failed rows of a table.
func failedRows(out string) string {
	var rows []string
	for line := range strings.Lines(out) {
		if f := strings.Fields(line); len(f) > 1 && f[1] == "fail" {
			rows = append(rows, line)
		}
	}
	return strings.Join(rows, "")
}

// openRows picks the rows not covered for want of a case, leaving out
// those of the other pull mode.
func openRows(out string) string {
	var rows []string
	for line := range strings.Lines(out) {
		if strings.Contains(line, " not covered ") && !strings.Contains(line, "applies where workers pull by") {
			rows = append(rows, line)
		}
	}
	return strings.Join(rows, "")
}

// writeTable appends the kit's table to the file make test prints.
func writeTable(t *testing.T, run, out string) {
	path := os.Getenv("SPOOL_CONFORMANCE_TABLE")
	if path == "" {
		return
	}
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		t.Errorf("writing the table: %v", err)
		return
	}
	if _, err := fmt.Fprintf(f, "\nspool-conformance --level %s:\n%s", run, out); err != nil {
		t.Errorf("writing the table: %v", err)
	}
	if err := f.Close(); err != nil {
		t.Errorf("writing the table: %v", err)
	}
}

func TestGoProducerMeetsTheProducerLevel(t *testing.T) {
	passes(t, "producer", "type", false, filepath.Join(bin, "goproducer"))
}

func TestGoWorkerMeetsTheCoreLevel(t *testing.T) {
	passes(t, "core", "type", false, filepath.Join(bin, "goworker"))
}

func TestGoWorkerMeetsTheCoreLevelPullingByPriority(t *testing.T) {
	passes(t, "core", "priority", false, filepath.Join(bin, "goworker"))
}

func TestGoWorkerMeetsTheFullLevel(t *testing.T) {
	passes(t, "full", "type", true, filepath.Join(bin, "goworker"))
}

// TestKitFailsABrokenWorker: a worker whose echo handler returns a wrong
// result fails the kit, with the case named and why.
func TestKitFailsABrokenWorker(t *testing.T) {
	out, code := kit(t, "--level", "core", "--run", "core/complete$", "--", filepath.Join(bin, "goworker"), "-break", "conformance.echo")
	if code != 1 {
		t.Errorf("exit %d, want 1", code)
	}
	if rows := failedRows(out); !strings.HasPrefix(rows, "core/complete") || !strings.Contains(rows, "want the payload") {
		t.Errorf("want core/complete failed for its result, got:\n%s", out)
	}
}

// TestKitListsTheCases: --list names every case of a level without a
// command, and --run with no match is a usage error.
func TestKitListsTheCases(t *testing.T) {
	out, code := kit(t, "--level", "full", "--list")
	if code != 0 || !strings.Contains(out, "core/heartbeat") || !strings.Contains(out, "full/workflow") || strings.Contains(out, "producer/") {
		t.Errorf("--level full --list: exit %d:\n%s", code, out)
	}
	if _, code := kit(t, "--level", "core", "--run", "nothing-matches", "--", "true"); code != 2 {
		t.Errorf("--run with no match: exit %d, want 2", code)
	}
}

// nodeProgram returns the command that runs a program of examples/node,
// failing with an install hint when node or its packages are missing.
func nodeProgram(t *testing.T, name string) []string {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatal("node is not installed: install Node.js 20 or newer (make deps says how), then run make examples")
	}
	dir, err := filepath.Abs(filepath.Join("..", "..", "examples", "node"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "@nats-io", "transport-node")); err != nil {
		t.Fatalf("the example's npm packages are not installed: run `npm ci` in examples/node (%v)", err)
	}
	return []string{node, filepath.Join(dir, name)}
}

// TestNodeProducerMeetsTheProducerLevel: the Node producer driver
// (examples/node) passes every producer case.
func TestNodeProducerMeetsTheProducerLevel(t *testing.T) {
	passes(t, "producer", "type", false, nodeProgram(t, "conformance-producer.js")...)
}

func TestNodeWorkerMeetsTheCoreLevel(t *testing.T) {
	passes(t, "core", "type", false, nodeProgram(t, "conformance.js")...)
}

func TestNodeWorkerMeetsTheCoreLevelPullingByPriority(t *testing.T) {
	passes(t, "core", "priority", false, nodeProgram(t, "conformance.js")...)
}
