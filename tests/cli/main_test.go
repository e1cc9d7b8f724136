package cli

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"go.uber.org/goleak"
)

// binDir holds the binaries TestMain builds.
var binDir string

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	dir, err := os.MkdirTemp("", "spool-cli-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	binDir = dir
	build := exec.Command("go", "build", "-race", "-o", dir+string(filepath.Separator),
		"github.com/spoolq/spool/producer/cmd/spool-producer",
		"github.com/spoolq/spool/streams/cmd/spool-admin",
		"github.com/spoolq/spool/consumer/cmd/spool-consumer",
		"github.com/spoolq/spool/tests/cmd/spool-dev",
		"github.com/spoolq/spool/examples/go/producer",
		"github.com/spoolq/spool/examples/go/worker")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building the binaries:", err)
		return 1
	}
	code := m.Run()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			return 1
		}
	}
	return code
}
