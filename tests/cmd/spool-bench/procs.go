package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

// serverProc is the JetStream server child.
type serverProc struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	url   string
	// nodes, when set, are the processes of a cluster this one stands
	// for: cpu sums theirs.
	nodes []*serverProc
	// profile, when set, is the file the next consume child's measured
	// window is CPU-profiled to on the server's side.
	profile string
}

func childCmd(ctx context.Context, args ...string) (*exec.Cmd, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("finding the harness binary: %w", err)
	}
	cmd := exec.CommandContext(ctx, exe, args...)
	cmd.Env = append(os.Environ(), childEnv+"=1")
	cmd.Stderr = os.Stderr
	return cmd, nil
}

func startServer(ctx context.Context, dir string, syncAlways bool) (*serverProc, error) {
	args := []string{"server", "-dir", dir}
	if syncAlways {
		args = append(args, "-sync")
	}
	return startChildServer(ctx, args...)
}

// startProfile starts the CPU profile asked for by profile, on every
// node of a cluster (node i's file ends in -node<i>.pprof).
func (s *serverProc) startProfile() {
	if s.profile == "" {
		return
	}
	if len(s.nodes) == 0 {
		fmt.Fprintf(s.stdin, "profile %s\n", s.profile)
		return
	}
	for i, n := range s.nodes {
		fmt.Fprintf(n.stdin, "profile %s-node%d.pprof\n", strings.TrimSuffix(s.profile, ".pprof"), i+1)
	}
}

// stopProfile ends the profile startProfile started.
func (s *serverProc) stopProfile() {
	if s.profile == "" {
		return
	}
	if len(s.nodes) == 0 {
		fmt.Fprintln(s.stdin, "stop")
	}
	for _, n := range s.nodes {
		fmt.Fprintln(n.stdin, "stop")
	}
	s.profile = ""
}

// stop closes the server's stdin and waits for it to exit.
func (s *serverProc) stop() error {
	_ = s.stdin.Close()
	done := make(chan error, 1)
	go func() { done <- s.cmd.Wait() }()
	select {
	case err := <-done:
		return err
	case <-time.After(time.Minute):
		_ = s.cmd.Process.Kill()
		return fmt.Errorf("server child did not stop")
	}
}

// cpu returns the server child's user+sys CPU time so far.
func (s *serverProc) cpu() time.Duration {
	if len(s.nodes) > 0 {
		var sum time.Duration
		for _, n := range s.nodes {
			sum += n.cpu()
		}
		return sum
	}
	return procCPU(s.cmd.Process.Pid)
}

// procCPU reads the CPU time of a live process from /proc/<pid>/stat.
func procCPU(pid int) time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	return statCPU(string(b))
}

// statCPU is utime+stime+cutime+cstime of a /proc/<pid>/stat line: the
// process's own CPU and that of the children it has waited for (none for
// the JetStream server; redis-server's snapshot children).
func statCPU(s string) time.Duration {
	i := strings.LastIndexByte(s, ')')
	if i < 0 || i+2 > len(s) {
		return 0
	}
	f := strings.Fields(s[i+2:])
	// fields after the command: state(0) ... utime(11) stime(12)
	// cutime(13) cstime(14), in clock ticks (100 per second on Linux).
	if len(f) < 15 {
		return 0
	}
	var ticks int64
	for _, v := range f[11:15] {
		n, _ := strconv.ParseInt(v, 10, 64)
		ticks += n
	}
	return time.Duration(ticks) * (time.Second / 100)
}

// consumeResult is a consume child's report plus the server's CPU over the
// same window.
type consumeResult struct {
	consumeReport
	ServerCPUus float64
}

// runConsume runs a consume child. onReady runs once the child's measured
// window has begun (the pickup scenario publishes then).
func runConsume(ctx context.Context, srv *serverProc, onReady func() error, args ...string) (consumeResult, error) {
	cmd, err := childCmd(ctx, append([]string{"consume", "-url", srv.url}, args...)...)
	if err != nil {
		return consumeResult{}, err
	}
	return runReporting(cmd, srv, onReady, fmt.Sprintf("consume child %v", args))
}

// runReporting runs cmd, a process that speaks the consume child's
// protocol: a line "start" when its measured window opens, then its
// consumeReport as one JSON line. srv's CPU is read over the same window;
// name says which process failed.
func runReporting(cmd *exec.Cmd, srv *serverProc, onReady func() error, name string) (consumeResult, error) {
	var res consumeResult
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return res, fmt.Errorf("consume stdout: %w", err)
	}
	if err := cmd.Start(); err != nil {
		return res, fmt.Errorf("starting the %s: %w", name, err)
	}
	sc := bufio.NewScanner(stdout)
	var cpu0 time.Duration
	var readyErr error
	got, ended := false, false
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "start":
			srv.startProfile()
			cpu0 = srv.cpu()
			if onReady != nil {
				readyErr = onReady()
			}
		case line == "end" && !ended:
			// The window closed: the consumer's shutdown that follows is
			// not the server's work for the tasks.
			res.ServerCPUus = float64((srv.cpu() - cpu0).Microseconds())
			srv.stopProfile()
			ended = true
		case strings.HasPrefix(line, "{"):
			if !ended {
				res.ServerCPUus = float64((srv.cpu() - cpu0).Microseconds())
				srv.stopProfile()
			}
			if err := json.Unmarshal([]byte(line), &res.consumeReport); err != nil {
				return res, fmt.Errorf("decoding the consume report: %w", err)
			}
			got = true
		}
	}
	if err := cmd.Wait(); err != nil {
		return res, fmt.Errorf("%s: %w", name, err)
	}
	if readyErr != nil {
		return res, readyErr
	}
	if !got {
		return res, fmt.Errorf("%s: no report", name)
	}
	return res, nil
}
