package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os/exec"
	"sync"
	"syscall"
	"time"
)

// Command runs the worker under test and starts it again whenever it exits
// on its own, as a process manager would: a worker that exits on a crash
// case comes back for the redelivery.
type Command struct {
	argv    []string
	env     []string
	stderr  io.Writer
	verbose bool
	logger  *slog.Logger

	mu     sync.Mutex
	cmd    *exec.Cmd
	done   chan struct{} // closed when cmd exited
	keep   bool          // start again after an exit
	exits  int           // exits the kit did not ask for
	waitEr error
}

func newCommand(argv, env []string, stderr io.Writer, verbose bool, logger *slog.Logger) *Command {
	return &Command{argv: argv, env: env, stderr: stderr, verbose: verbose, logger: logger}
}

// start starts the command and keeps it running until stop.
func (c *Command) start() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.keep = true
	return c.startLocked()
}

func (c *Command) startLocked() error {
	cmd := exec.Command(c.argv[0], c.argv[1:]...)
	cmd.Env = c.env
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if c.verbose {
		cmd.Stdout, cmd.Stderr = c.stderr, c.stderr
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting %s: %w", c.argv[0], err)
	}
	done := make(chan struct{})
	c.cmd, c.done = cmd, done
	go c.watch(cmd, done)
	return nil
}

// restartPause is how long the kit waits before it starts an exited
// worker again, as a process manager does.
const restartPause = 100 * time.Millisecond

// watch waits for the process and starts it again if the kit did not stop
// it.
func (c *Command) watch(cmd *exec.Cmd, done chan struct{}) {
	err := cmd.Wait()
	close(done)
	c.mu.Lock()
	mine := c.keep && c.cmd == cmd
	if mine {
		c.exits++
	}
	c.mu.Unlock()
	if !mine {
		return
	}
	c.logger.Info("the worker exited; starting it again", "err", err)
	<-time.After(restartPause)
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.keep || c.cmd != cmd {
		return // stopped, or started anew, meanwhile
	}
	if err := c.startLocked(); err != nil {
		c.waitEr = err
		c.logger.Error("restarting the worker", "err", err)
	}
}

// Exits is how often the command exited without the kit asking.
func (c *Command) Exits() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.exits
}

// stop sends SIGTERM, waits for the exit until ctx ends, then kills the
// process group.
func (c *Command) stop(ctx context.Context) error {
	c.mu.Lock()
	c.keep = false
	cmd, done, restartErr := c.cmd, c.done, c.waitEr
	c.mu.Unlock()
	if restartErr != nil {
		return restartErr
	}
	if cmd == nil {
		return nil
	}
	_ = cmd.Process.Signal(syscall.SIGTERM) // it may have exited already
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) // the group: a wrapper's children too
		<-done
		return fmt.Errorf("%s did not stop within its deadline after SIGTERM; killed", c.argv[0])
	}
}

// Driver is the producer under test: one JSON request a line to its stdin,
// one JSON answer a line from its stdout.
type Driver struct {
	cmd   *exec.Cmd
	in    io.WriteCloser
	out   *bufio.Scanner
	lines chan []byte
	mu    sync.Mutex
	// late is set once a request went unanswered: its answer may still
	// come and would be taken for the next one's.
	late bool
}

func startDriver(argv, env []string, stderr io.Writer, verbose bool) (*Driver, error) {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = env
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if verbose {
		cmd.Stderr = stderr
	}
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", argv[0], err)
	}
	d := &Driver{cmd: cmd, in: in, out: bufio.NewScanner(out), lines: make(chan []byte)}
	d.out.Buffer(make([]byte, 64<<10), 16<<20)
	go d.read()
	return d, nil
}

// read hands each answer line to ask; the channel closes when the driver's
// stdout does.
func (d *Driver) read() {
	defer close(d.lines)
	for d.out.Scan() {
		line := append([]byte(nil), d.out.Bytes()...)
		d.lines <- line
	}
}

// Answer is one answer of the driver.
type Answer struct {
	OK        bool            `json:"ok"`
	ID        string          `json:"id,omitempty"`
	Duplicate bool            `json:"duplicate,omitempty"`
	Found     bool            `json:"found,omitempty"`
	Result    json.RawMessage `json:"result,omitempty"`
	Code      string          `json:"code,omitempty"`
	Error     string          `json:"error,omitempty"`
}

// ask sends one request and reads its answer, or fails when ctx ends.
func (d *Driver) ask(ctx context.Context, req map[string]any) (Answer, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.late {
		return Answer{}, errors.New("the driver did not answer an earlier request in time: its answers can no longer be matched")
	}
	b, err := json.Marshal(req)
	if err != nil {
		return Answer{}, err
	}
	if _, err := d.in.Write(append(b, '\n')); err != nil {
		return Answer{}, fmt.Errorf("writing to the driver: %w", err)
	}
	select {
	case line, ok := <-d.lines:
		if !ok {
			return Answer{}, errors.New("the driver closed its stdout")
		}
		var a Answer
		if err := json.Unmarshal(line, &a); err != nil {
			return Answer{}, fmt.Errorf("answer %q to %s is not a JSON answer: %w", line, b, err)
		}
		return a, nil
	case <-ctx.Done():
		d.late = true
		return Answer{}, fmt.Errorf("no answer to %s: %w", b, ctx.Err())
	}
}

// close closes the driver's stdin, which ends it, and waits for it.
func (d *Driver) close() error {
	_ = d.in.Close() // the driver may have exited already
	done := make(chan error, 1)
	go func() { done <- d.cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			return fmt.Errorf("the driver exited: %w", err)
		}
		return nil
	case <-time.After(10 * time.Second):
		_ = syscall.Kill(-d.cmd.Process.Pid, syscall.SIGKILL)
		<-done
		return errors.New("the driver did not exit within 10s of its stdin closing; killed")
	}
}
