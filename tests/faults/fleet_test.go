package faults_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/spoolq/spool/producer"
	"github.com/spoolq/spool/tests/checker"
)

// fleet runs spool-faultworker processes against one NATS URL list. Every
// process is killed and reaped when the test ends, whatever happened.
type fleet struct {
	t   testing.TB
	dir string
	env []string
	chk *checker.Checker

	mu    sync.Mutex
	procs []*proc
	kills int
	stops int
}

// proc is one worker process.
type proc struct {
	cmd     *exec.Cmd
	pid     string
	log     string // execution log
	stderr  string
	done    chan struct{} // closed when the process has been reaped
	waitErr error
	killed  bool
}

func (p *proc) running() bool {
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// newFleet prepares a fleet connecting to url; extra are SPOOL_*=... settings.
func newFleet(t testing.TB, url string, chk *checker.Checker, extra ...string) *fleet {
	f := &fleet{t: t, dir: t.TempDir(), chk: chk}
	f.env = append(os.Environ(),
		"SPOOL_NATS_URL="+url,
		"SPOOL_LOG_LEVEL=info",
		"SPOOL_LOG_FORMAT=text",
	)
	f.env = append(f.env, extra...)
	t.Cleanup(f.reapAll)
	return f
}

// twoWorkers starts two worker processes of 16 slots on url and returns
// them with a producer client on nc (5s timeout).
func twoWorkers(t testing.TB, url string, nc *nats.Conn, chk *checker.Checker) (*fleet, *producer.Client) {
	t.Helper()
	fl := newFleet(t, url, chk, "SPOOL_CONCURRENCY=16")
	for range 2 {
		fl.start()
	}
	client, err := producer.New(nc, producer.WithTimeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(client.Close)
	return fl, client
}

// start starts one more worker process.
func (f *fleet) start() *proc {
	f.t.Helper()
	return f.startBin(workerBin)
}

// startBin starts one more process of bin with the fleet's environment
// plus extra; the fault worker also gets its execution log.
func (f *fleet) startBin(bin string, extra ...string) *proc {
	f.t.Helper()
	f.mu.Lock()
	n := len(f.procs)
	f.mu.Unlock()
	p := &proc{
		log:    filepath.Join(f.dir, fmt.Sprintf("exec-%03d.log", n)),
		stderr: filepath.Join(f.dir, fmt.Sprintf("stderr-%03d.log", n)),
		done:   make(chan struct{}),
	}
	errFile, err := os.Create(p.stderr)
	if err != nil {
		f.t.Fatal(err)
	}
	defer errFile.Close() // the child keeps its own descriptor
	p.cmd = exec.Command(bin)
	p.cmd.Env = append(append([]string(nil), f.env...), extra...)
	if bin == workerBin {
		p.cmd.Env = append(p.cmd.Env, "SPOOL_FAULT_LOG="+p.log)
	}
	p.cmd.Stdout, p.cmd.Stderr = errFile, errFile
	if err := p.cmd.Start(); err != nil {
		f.t.Fatalf("starting %s: %v", filepath.Base(bin), err)
	}
	p.pid = strconv.Itoa(p.cmd.Process.Pid)
	go func() {
		p.waitErr = p.cmd.Wait()
		close(p.done)
	}()
	f.mu.Lock()
	f.procs = append(f.procs, p)
	f.mu.Unlock()
	return p
}

// running lists the processes still running.
func (f *fleet) running() []*proc {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []*proc
	for _, p := range f.procs {
		if p.running() {
			out = append(out, p)
		}
	}
	return out
}

// kill sends SIGKILL to p, waits until it is reaped and tells the checker.
func (f *fleet) kill(p *proc) {
	f.t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil && !errors.Is(err, os.ErrProcessDone) {
		f.t.Fatalf("killing worker %s: %v", p.pid, err)
	}
	<-p.done
	f.mu.Lock()
	p.killed = true
	f.kills++
	f.mu.Unlock()
	f.chk.Faulted(p.pid, "SIGKILL")
}

// signal sends sig to p.
func (f *fleet) signal(p *proc, sig syscall.Signal) {
	f.t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		f.t.Fatalf("sending %s to worker %s: %v", sig, p.pid, err)
	}
}

// stopAll stops every running worker with SIGTERM and fails the test if
// one does not exit cleanly within timeout.
func (f *fleet) stopAll(timeout time.Duration) {
	f.t.Helper()
	procs := f.running()
	for _, p := range procs {
		f.signal(p, syscall.SIGCONT) // a paused worker must wake to stop
		f.signal(p, syscall.SIGTERM)
	}
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for _, p := range procs {
		select {
		case <-p.done:
		case <-deadline.C:
			f.t.Fatalf("worker %s did not stop within %s after SIGTERM\n%s", p.pid, timeout, f.tail(p))
		}
		if p.waitErr != nil && !termBeforeMain(p.cmd.ProcessState) {
			f.t.Errorf("worker %s exited with %v\n%s", p.pid, p.waitErr, f.tail(p))
		}
	}
}

// termBeforeMain reports a worker that SIGTERM ended by the signal's
// default action: one started just before stopAll, stopped before its main
// installed the handler (its first statement), so it ran nothing.
func termBeforeMain(ps *os.ProcessState) bool {
	ws, ok := ps.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled() && ws.Signal() == syscall.SIGTERM
}

// checkAlive fails the test for every worker that ended without being
// killed or stopped: no input may kill a worker.
func (f *fleet) checkAlive() {
	f.t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, p := range f.procs {
		if !p.running() && !p.killed {
			f.t.Errorf("worker %s died on its own: %v\n%s", p.pid, p.waitErr, f.tail(p))
		}
	}
}

// tail returns the end of p's stderr.
func (f *fleet) tail(p *proc) string {
	b, err := os.ReadFile(p.stderr)
	if err != nil {
		return err.Error()
	}
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

// tails returns the end of every worker process's stderr (its warnings),
// for a failure's report.
func (f *fleet) tails() string {
	f.mu.Lock()
	procs := append([]*proc(nil), f.procs...)
	f.mu.Unlock()
	var b strings.Builder
	for _, p := range procs {
		fmt.Fprintf(&b, "worker %s:\n%s\n", p.pid, f.tail(p))
	}
	return b.String()
}

// mentions returns the lines of every worker process's stderr that name
// one of ids (at most 40), for a failure's report.
func (f *fleet) mentions(ids []string) string {
	f.mu.Lock()
	procs := append([]*proc(nil), f.procs...)
	f.mu.Unlock()
	var b strings.Builder
	n := 0
	for _, p := range procs {
		data, err := os.ReadFile(p.stderr)
		if err != nil {
			fmt.Fprintf(&b, "worker %s: %v\n", p.pid, err)
			continue
		}
		for line := range strings.Lines(string(data)) {
			if n < 40 && slices.ContainsFunc(ids, func(id string) bool { return strings.Contains(line, id) }) {
				fmt.Fprintf(&b, "worker %s: %s", p.pid, line)
				n++
			}
		}
	}
	return b.String()
}

// readLogs feeds every execution log to the checker and returns the lines
// read and the torn lines skipped.
func (f *fleet) readLogs() (lines, torn int) {
	f.t.Helper()
	f.mu.Lock()
	procs := append([]*proc(nil), f.procs...)
	f.mu.Unlock()
	for _, p := range procs {
		b, err := os.ReadFile(p.log)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			f.t.Fatal(err)
		}
		l, tr, err := checker.ReadExecutionLog(bytes.NewReader(b), f.chk)
		if err != nil {
			f.t.Fatal(err)
		}
		lines += l
		torn += tr
	}
	return lines, torn
}

// reapAll kills every process still running and waits for it.
func (f *fleet) reapAll() {
	f.mu.Lock()
	procs := append([]*proc(nil), f.procs...)
	f.mu.Unlock()
	for _, p := range procs {
		if p.running() {
			_ = p.cmd.Process.Signal(syscall.SIGKILL) // it may have exited meanwhile
		}
		<-p.done
	}
}

// killUntilDone kills a random worker and starts a replacement every
// every, until the producer has reported on produced and done returns
// nil. It fails the test when the producer fails or ctx ends first, and
// returns when each killed worker was seen gone, by pid.
func (f *fleet) killUntilDone(ctx context.Context, produced <-chan error, every time.Duration, done func(context.Context) error) map[string]time.Time {
	f.t.Helper()
	killedAt := map[string]time.Time{}
	ticker := time.NewTicker(every)
	defer ticker.Stop()
	producing := true
	for {
		select {
		case err := <-produced:
			if err != nil {
				f.t.Fatalf("enqueueing: %v", err)
			}
			producing = false
			continue
		case <-ctx.Done():
			f.t.Fatalf("tasks not done before the deadline: %v", done(context.WithoutCancel(ctx)))
		case <-ticker.C:
		}
		if !producing && done(ctx) == nil {
			return killedAt
		}
		running := f.running()
		victim := running[rand.IntN(len(running))]
		f.kill(victim)
		killedAt[victim.pid] = time.Now()
		f.start()
	}
}
