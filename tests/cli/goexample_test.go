package cli

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/spoolq/spool/streams"
	"github.com/spoolq/spool/streams/streamstest"
)

// goExamples are the complete Go programs the README shows, by their path
// in the repository and the binary TestMain builds from each.
var goExamples = []struct{ path, bin string }{
	{"examples/go/producer/main.go", "producer"},
	{"examples/go/worker/main.go", "worker"},
}

// TestREADMEGoPrograms checks that the README shows each complete Go
// program verbatim, so the program a reader copies is the one
// TestGoExamples runs.
func TestREADMEGoPrograms(t *testing.T) {
	t.Parallel()
	root := repoRoot(t)
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, ex := range goExamples {
		src, err := os.ReadFile(filepath.Join(root, ex.path))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Contains(readme, []byte("```go\n"+string(src)+"```\n")) {
			t.Errorf("README.md lacks a ```go block equal to %s: copy the file into it", ex.path)
		}
	}
}

// TestGoExamples runs the README's worker and producer programs against a
// real server, once where workers pull by priority and once where they pull
// by type: the producer's task must complete with the worker's greeting,
// with no warning that nobody serves its type, and the worker must stop
// cleanly on SIGINT.
func TestGoExamples(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{streams.ConsumersByPriority, streams.ConsumersByType} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			env := streamstest.Start(t, streams.Settings{Consumers: mode})
			ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
			defer cancel()
			environ := append(os.Environ(), "SPOOL_NATS_URL="+env.URL)

			worker := exec.CommandContext(ctx, filepath.Join(binDir, "worker"))
			worker.Env = environ
			stderr, err := worker.StderrPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := worker.Start(); err != nil {
				t.Fatal(err)
			}
			// The worker logs one line once it pulls; the producer starts then.
			lines := bufio.NewScanner(stderr)
			var log strings.Builder
			for lines.Scan() {
				log.WriteString(lines.Text() + "\n")
				if strings.Contains(lines.Text(), "serving greet.hello") {
					break
				}
			}
			if !strings.Contains(log.String(), "serving greet.hello") {
				_ = worker.Process.Kill()
				_ = worker.Wait()
				t.Fatalf("the worker did not start:\n%s", log.String())
			}
			rest := make(chan string, 1)
			go func() {
				b, _ := io.ReadAll(stderr)
				rest <- string(b)
			}()

			prod := exec.CommandContext(ctx, filepath.Join(binDir, "producer"))
			prod.Env = environ
			var prodErr bytes.Buffer
			prod.Stderr = &prodErr
			out, err := prod.Output()
			if err != nil {
				t.Errorf("the producer failed: %v\n%s%s", err, out, prodErr.String())
			}
			// The worker registers the NATS service, so the producer's check
			// sees greet.hello served and warns of nothing.
			if prodErr.Len() > 0 {
				t.Errorf("the producer wrote on stderr: %s", prodErr.String())
			}
			if want := `completed after 1 attempt(s): {"greeting":"Hello, Ada!"}`; !strings.Contains(string(out), want) {
				t.Errorf("the producer printed %q, want a line ending %q", out, want)
			}
			if !strings.HasPrefix(string(out), "enqueued ") {
				t.Errorf("the producer printed %q, want it to start with the task id", out)
			}

			if err := worker.Process.Signal(syscall.SIGINT); err != nil {
				t.Fatal(err)
			}
			tail := <-rest
			if err := worker.Wait(); err != nil {
				t.Errorf("the worker did not stop cleanly on SIGINT: %v\n%s%s", err, log.String(), tail)
			}
		})
	}
}
