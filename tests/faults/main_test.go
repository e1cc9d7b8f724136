package faults_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"

	"go.uber.org/goleak"

	"github.com/spoolq/spool/streams/streamstest"
	"github.com/spoolq/spool/tests/checker"
)

// workerBin is the spool-faultworker binary built for this run, in binDir,
// where the other binaries a scenario needs are built when it first asks
// (spoolBinaries).
var workerBin, binDir string

// summary collects one row per scenario; TestMain prints it at the end.
var summary checker.Table

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(suite{m}, streamstest.ServerGoroutines()...)
}

// suite builds the fault worker before the tests and prints the summary
// table after them.
type suite struct{ m *testing.M }

func (s suite) Run() int {
	dir, err := os.MkdirTemp("", "spool-faults-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "faults:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	binDir = dir
	workerBin = filepath.Join(dir, "spool-faultworker")
	build := exec.Command("go", "build", "-o", workerBin, "github.com/spoolq/spool/tests/cmd/spool-faultworker")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "faults: building spool-faultworker:", err)
		return 1
	}
	code := s.m.Run()
	if summary.Len() == 0 {
		return code
	}
	table := fmt.Sprintf("\nSpool fault suite (soak=%v):\n%s\n", soak(), summary.String())
	fmt.Print(table)
	// go test hides a passing package's output without -v: make test
	// names a file to print the table from.
	if path := os.Getenv("SPOOL_FAULTS_TABLE"); path != "" {
		if err := os.WriteFile(path, []byte(table), 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "faults: writing the table:", err)
			return 1
		}
	}
	return code
}

// spoolBinaries builds spool-consumer and spool-admin into binDir, once
// per run, for the scenarios that run the released binaries.
var spoolBinaries = sync.OnceValue(func() error {
	build := exec.Command("go", "build", "-o", binDir+string(filepath.Separator),
		"github.com/spoolq/spool/consumer/cmd/spool-consumer",
		"github.com/spoolq/spool/streams/cmd/spool-admin")
	out, err := build.CombinedOutput()
	if err != nil {
		return fmt.Errorf("building spool-consumer and spool-admin: %w\n%s", err, out)
	}
	return nil
})

// soak reports whether the long soak sizes are asked for (make soak).
func soak() bool { return os.Getenv("SPOOL_SOAK") != "" }

// soakSync is the fault table's note on the election clusters' durable
// setting: sync_interval: always under soak only.
func soakSync() string {
	if soak() {
		return ", SyncAlways"
	}
	return ""
}

// scale returns n, or n*soakFactor under soak.
func scale(n int) int {
	if soak() {
		return n * soakFactor
	}
	return n
}

// soakFactor multiplies task counts and fault rounds under SPOOL_SOAK.
const soakFactor = 5
