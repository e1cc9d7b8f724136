// Command goproducer is the Go producer the conformance kit proves in the
// project's own tests: a driver that reads one JSON request a line on stdin,
// carries it out with producer.Client (a replay with streams/dlq) and writes one JSON answer a line on
// stdout (the protocol is in docs/conformance.md). It connects where
// SPOOL_NATS_URL points and ends when stdin closes.
//
//	spool-conformance --level producer -- goproducer
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/spoolq/spool/producer"
	spool "github.com/spoolq/spool/shared"
	"github.com/spoolq/spool/shared/config"
	"github.com/spoolq/spool/shared/logging"
	"github.com/spoolq/spool/shared/natsconn"
	"github.com/spoolq/spool/streams/dlq"
)

// Request is one line of the driver protocol.
type Request struct {
	Op         string `json:"op"`
	ID         string `json:"id"`
	Type       string `json:"type"`
	Priority   string `json:"priority"`
	Payload    string `json:"payload"`
	Delay      string `json:"delay"`
	MaxRetries *int   `json:"max_retries"`
	Timeout    string `json:"timeout"`
	UniqueKey  string `json:"unique_key"`
	UniqueTTL  string `json:"unique_ttl"`
	By         string `json:"by"`
	Seq        uint64 `json:"seq"`
	Reason     string `json:"reason"`
}

// Answer is one answer line.
type Answer struct {
	OK        bool          `json:"ok"`
	ID        string        `json:"id,omitempty"`
	Duplicate bool          `json:"duplicate,omitempty"`
	Found     bool          `json:"found,omitempty"`
	Result    *spool.Result `json:"result,omitempty"`
	Code      string        `json:"code,omitempty"`
	Error     string        `json:"error,omitempty"`
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Stdin, os.Stdout)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "goproducer:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, in io.Reader, out io.Writer) error {
	var cfg config.Common
	if err := config.Load(&cfg); err != nil {
		return err
	}
	logger, err := logging.New(os.Stderr, cfg.LogFormat, cfg.LogLevel)
	if err != nil {
		return err
	}
	sctx, cancel := context.WithTimeout(ctx, cfg.Startup())
	defer cancel()
	nc, err := natsconn.Connect(sctx, cfg.NATS, "conformance goproducer", logger)
	if err != nil {
		return err
	}
	defer nc.Close()
	c, err := producer.New(nc, producer.WithNames(cfg.Names()), producer.WithLogger(logger))
	if err != nil {
		return err
	}
	defer c.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	enc := json.NewEncoder(out)
	for sc.Scan() {
		var req Request
		a := Answer{}
		if err := json.Unmarshal(sc.Bytes(), &req); err != nil {
			a = Answer{Code: "bad_request", Error: err.Error()}
		} else {
			a = serve(ctx, c, js, req)
		}
		if err := enc.Encode(a); err != nil {
			return fmt.Errorf("writing an answer: %w", err)
		}
	}
	return sc.Err()
}

// serve carries out one request.
func serve(ctx context.Context, c *producer.Client, js jetstream.JetStream, req Request) Answer {
	switch req.Op {
	case "enqueue":
		return enqueue(ctx, c, req)
	case "result":
		r, err := c.Result(ctx, req.ID)
		if errors.Is(err, producer.ErrTaskNotFound) {
			return Answer{OK: true}
		}
		if err != nil {
			return failure(err)
		}
		return Answer{OK: true, Found: true, Result: &r}
	case "wait":
		d, err := duration(req.Timeout, 30*time.Second)
		if err != nil {
			return failure(err)
		}
		wctx, cancel := context.WithTimeout(ctx, d)
		defer cancel()
		r, err := c.Wait(wctx, req.ID)
		if err != nil {
			return failure(err)
		}
		return Answer{OK: true, Found: true, Result: &r}
	case "cancel":
		r, err := c.Cancel(ctx, req.ID, producer.CancelBy(req.By), producer.CancelReason(req.Reason))
		if err != nil {
			return failure(err)
		}
		return Answer{OK: true, Found: true, Result: &r}
	case "replay":
		r, err := dlq.New(js, c.Names()).Replay(ctx, req.Seq)
		if err != nil {
			return failure(err)
		}
		return Answer{OK: true, ID: r.TaskID}
	default:
		return Answer{Code: "bad_request", Error: fmt.Sprintf("unknown op %q", req.Op)}
	}
}

func enqueue(ctx context.Context, c *producer.Client, req Request) Answer {
	t := producer.Task{Type: req.Type, ID: req.ID, Payload: []byte(req.Payload), MaxRetries: req.MaxRetries, UniqueKey: req.UniqueKey}
	if req.Priority != "" {
		p, err := spool.ParsePriority(req.Priority)
		if err != nil {
			return Answer{Code: "bad_request", Error: err.Error()}
		}
		t.Priority = &p
	}
	var err error
	if t.Delay, err = duration(req.Delay, 0); err != nil {
		return failure(err)
	}
	if t.Timeout, err = duration(req.Timeout, 0); err != nil {
		return failure(err)
	}
	if t.UniqueTTL, err = duration(req.UniqueTTL, 0); err != nil {
		return failure(err)
	}
	res, err := c.Enqueue(ctx, t)
	if err != nil {
		return failure(err)
	}
	return Answer{OK: true, ID: res.ID, Duplicate: res.Duplicate}
}

// duration parses an optional Go duration.
func duration(s string, def time.Duration) (time.Duration, error) {
	if s == "" {
		return def, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("bad_request: %w", err)
	}
	return d, nil
}

// failure turns an error into an answer with the protocol's code.
func failure(err error) Answer {
	var uc *producer.UniqueConflictError
	code := "error"
	switch {
	case errors.As(err, &uc):
		code = "duplicate_unique"
	case errors.Is(err, producer.ErrResultDiscarded):
		code = "result_discarded"
	case errors.Is(err, producer.ErrTaskFinished):
		code = "task_finished"
	case errors.Is(err, producer.ErrTaskNotFound):
		code = "not_found"
	case errors.Is(err, context.DeadlineExceeded):
		code = "timeout"
	}
	return Answer{Code: code, Error: err.Error()}
}
