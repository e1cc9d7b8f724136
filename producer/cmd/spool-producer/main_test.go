package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"
	"go.uber.org/goleak"

	spool "github.com/spoolq/spool/shared"
	"github.com/spoolq/spool/shared/config"
	"github.com/spoolq/spool/shared/fleet"
	"github.com/spoolq/spool/streams"
	"github.com/spoolq/spool/streams/embedded"
	"github.com/spoolq/spool/streams/streamstest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

type server struct {
	url   string
	js    jetstream.JetStream
	tasks jetstream.Stream
}

func ctxFor(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func startServer(t *testing.T) *server {
	t.Helper()
	return startServerWith(t, streams.Settings{})
}

// startServerWith starts a server provisioned with settings.
func startServerWith(t *testing.T, settings streams.Settings) *server {
	t.Helper()
	s, err := embedded.Start(embedded.Options{StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	nc, err := nats.Connect(s.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	topo, err := streams.New(spool.DefaultNames(), settings)
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxFor(t)
	if err := streams.Provision(ctx, js, topo, slog.New(slog.NewTextHandler(t.Output(), nil))); err != nil {
		t.Fatal(err)
	}
	tasks, err := js.Stream(ctx, "SPOOL_TASKS")
	if err != nil {
		t.Fatal(err)
	}
	return &server{url: s.ClientURL(), js: js, tasks: tasks}
}

// cli runs spool-producer with args against srv and returns stdout.
func (s *server) cli(t *testing.T, stdin string, args ...string) (string, error) {
	t.Helper()
	var stdout bytes.Buffer
	args = append(args[:1:1], append([]string{"--url", s.url}, args[1:]...)...)
	err := run(ctxFor(t), args, strings.NewReader(stdin), &stdout, t.Output())
	return stdout.String(), err
}

func (s *server) streamMsgs(t *testing.T) uint64 {
	t.Helper()
	info, err := s.tasks.Info(ctxFor(t))
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Msgs
}

func (s *server) lastTask(t *testing.T, subject string) *jetstream.RawStreamMsg {
	t.Helper()
	m, err := s.tasks.GetLastMsgForSubject(ctxFor(t), subject)
	if err != nil {
		t.Fatalf("no task on %s: %v", subject, err)
	}
	return m
}

func TestEnqueueCommand(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	out, err := s.cli(t, "", "enqueue", "--type", "email.send", "--priority", "high", "--payload", `{"to":"a"}`,
		"--id", "cli-1", "--max-retries", "0", "--timeout", "45s", "--unique-key", "u1", "--unique-ttl", "1h",
		"--header", "X-Tenant=acme", "--header", "X-Env=dev", "--traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	if err != nil || !strings.Contains(out, "enqueued cli-1 on spool.tasks.high.email.send") {
		t.Fatalf("%q, %v", out, err)
	}
	m := s.lastTask(t, "spool.tasks.high.email.send")
	for k, v := range map[string]string{"Spool-Task-Id": "", "Nats-Msg-Id": "cli-1", "Spool-Max-Retries": "0",
		"Spool-Timeout": "45s", "Spool-Unique-Key": "u1", "X-Tenant": "acme", "X-Env": "dev"} {
		if got := m.Header.Get(k); got != v {
			t.Errorf("header %s = %q, want %q", k, got, v)
		}
	}
	if string(m.Data) != `{"to":"a"}` {
		t.Errorf("payload %q", m.Data)
	}

	// Same id again: a duplicate.
	out, err = s.cli(t, "", "enqueue", "--type", "email.send", "--priority", "high", "--id", "cli-1")
	if err != nil || !strings.HasPrefix(out, "duplicate cli-1") {
		t.Fatalf("%q, %v", out, err)
	}

	// Payload from a file and from stdin, JSON output.
	file := filepath.Join(t.TempDir(), "p.bin")
	if err := os.WriteFile(file, []byte{0, 1, 2}, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := s.cli(t, "", "enqueue", "--type", "file", "--payload-file", file); err != nil {
		t.Fatal(err)
	}
	if got := s.lastTask(t, "spool.tasks.normal.file").Data; !bytes.Equal(got, []byte{0, 1, 2}) {
		t.Errorf("file payload %v", got)
	}
	out, err = s.cli(t, "from stdin", "enqueue", "--type", "stdin", "--payload-file", "-", "--json")
	if err != nil {
		t.Fatal(err)
	}
	var res struct{ ID, Subject string }
	if err := json.Unmarshal([]byte(out), &res); err != nil || res.Subject != "spool.tasks.normal.stdin" {
		t.Fatalf("json output %q: %v", out, err)
	}
	if got := s.lastTask(t, "spool.tasks.normal.stdin").Data; string(got) != "from stdin" {
		t.Errorf("stdin payload %q", got)
	}
	if n := s.streamMsgs(t); n != 3 {
		t.Fatalf("stream holds %d", n)
	}
}

func TestEnqueueCommandRejectsBadFlags(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	tests := []struct {
		name    string
		args    []string
		wantErr string
	}{
		{"no type", []string{"enqueue"}, "--type is required"},
		{"priority", []string{"enqueue", "--type", "a", "--priority", "urgent"}, `--priority: "urgent" is not one of critical, high, normal, low, idle`},
		{"type", []string{"enqueue", "--type", "a b"}, `--type: "a b" has ' ' at 1`},
		{"id", []string{"enqueue", "--type", "a", "--id", "a.b"}, `--id: "a.b" has '.' at 1`},
		{"negative delay", []string{"enqueue", "--type", "a", "--delay", "-1s"}, "--delay: -1s is negative"},
		{"process-at", []string{"enqueue", "--type", "a", "--process-at", "tomorrow"}, "--process-at"},
		{"header syntax", []string{"enqueue", "--type", "a", "--header", "novalue"}, "Name=Value"},
		{"reserved header", []string{"enqueue", "--type", "a", "--header", "Nats-TTL=1s"}, `--header: header "Nats-TTL" is reserved`},
		{"retries", []string{"enqueue", "--type", "a", "--max-retries", "5000"}, "--max-retries: 5000 must be 0 to 1000"},
		{"retries not a number", []string{"enqueue", "--type", "a", "--max-retries", "abc"}, `--max-retries: "abc" is not a whole number`},
		{"unique without ttl", []string{"enqueue", "--type", "a", "--unique-key", "k"}, "--unique-ttl"},
		{"two payloads", []string{"enqueue", "--type", "a", "--payload", "{}", "--payload-file", "-"}, "at most one"},
		{"text and JSON payloads", []string{"enqueue", "--type", "a", "--payload", "{}", "--payload-text", "x"}, "at most one"},
		{"malformed JSON payload", []string{"enqueue", "--type", "a", "--payload", `{"a":1`},
			"--payload: the payload ends in the middle of a JSON value (--payload takes JSON; --payload-text sends text as given, --payload-file a file's bytes)"},
		{"text as JSON payload", []string{"enqueue", "--type", "a", "--payload", "hello"},
			"--payload: malformed JSON at byte 1: invalid character 'h' looking for beginning of value"},
		{"two JSON values", []string{"enqueue", "--type", "a", "--payload", "{} {}"}, "--payload: the payload holds more than one JSON value"},
		{"NaN payload", []string{"enqueue", "--type", "a", "--payload", `{"x":NaN}`}, "--payload: malformed JSON at byte 6"},
		{"missing file", []string{"enqueue", "--type", "a", "--payload-file", "/nonexistent/x"}, "--payload-file"},
		{"stray argument", []string{"enqueue", "--type", "a", "extra"}, "no arguments"},
		{"result without id", []string{"result"}, "one task id"},
		{"result missing", []string{"result", "nope"}, `task "nope" is not known`},
		{"cancel missing", []string{"cancel", "nope"}, "task not found"},
		{"load without limit", []string{"load"}, "--count or --duration"},
		{"load bad mix", []string{"load", "--count", "1", "--mix", "urgent=1"}, "--mix"},
		{"load zero mix", []string{"load", "--count", "1", "--mix", "high=0"}, "all weights are zero"},
		{"load bad batch", []string{"load", "--count", "1", "--batch", "0"}, "--batch"},
		{"serve bad addr", []string{"serve", "--addr", "nope"}, "--addr"},
		{"unknown command", []string{"frobnicate"}, "unknown command"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := s.cli(t, "", tt.args...)
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("want an error containing %q, got %v", tt.wantErr, err)
			}
		})
	}
	if n := s.streamMsgs(t); n != 0 {
		t.Fatalf("bad commands stored %d tasks", n)
	}
}

func TestResultAndCancelCommands(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	ctx := ctxFor(t)
	out, err := s.cli(t, "", "enqueue", "--type", "remind", "--id", "r1", "--delay", "1h")
	if err != nil || !strings.HasPrefix(out, "scheduled r1 for ") {
		t.Fatalf("%q, %v", out, err)
	}
	if out, err := s.cli(t, "", "cancel", "-by", "ada", "-reason", "obsolete", "r1"); err != nil || out != "cancelled r1\n" {
		t.Fatalf("cancel: %q, %v", out, err)
	}
	if _, err := s.cli(t, "", "cancel", "r1"); err == nil || !strings.Contains(err.Error(), "already cancelled by ada (obsolete)") {
		t.Fatalf("second cancel: %v", err)
	}
	if out, err := s.cli(t, "", "result", "r1"); err != nil || !strings.Contains(out, `"state": "cancelled"`) || !strings.Contains(out, `"cancelled_by": "ada"`) {
		t.Fatalf("result after cancel: %q, %v", out, err)
	}

	kv, err := s.js.KeyValue(ctx, "spool_results")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.PutString(ctx, "r2", `{"id":"r2","type":"a","priority":"normal","state":"processing","attempts":1,"enqueued_at":"2026-01-01T00:00:00Z"}`); err != nil {
		t.Fatal(err)
	}
	out, err = s.cli(t, "", "result", "r2")
	if err != nil || !strings.Contains(out, `"state": "processing"`) {
		t.Fatalf("result: %q, %v", out, err)
	}
	// --wait ends at its timeout while the task runs...
	if _, err := s.cli(t, "", "result", "r2", "--wait", "--timeout", "200ms"); err == nil ||
		err.Error() != `task "r2" is still processing after waiting 200ms (--timeout sets how long; 0 waits until interrupted)` {
		t.Fatalf("wait with timeout: %v", err)
	}
	// ...and says when the id is not known at all.
	if _, err := s.cli(t, "", "result", "r3", "--wait", "--timeout", "200ms"); err == nil ||
		err.Error() != `task "r3" is not known: no result document, no pending schedule and no task queued after waiting 200ms (check the id; a result expires after SPOOL_RESULT_TTL)` {
		t.Fatalf("wait for an unknown id: %v", err)
	}
	// ...and returns once it completes.
	if _, err := kv.PutString(ctx, "r2", `{"id":"r2","type":"a","priority":"normal","state":"completed","attempts":1,"result":{"n":1},"enqueued_at":"2026-01-01T00:00:00Z"}`); err != nil {
		t.Fatal(err)
	}
	out, err = s.cli(t, "", "result", "--wait", "r2", "--timeout", "10s")
	if err != nil || !strings.Contains(out, `"state": "completed"`) {
		t.Fatalf("wait: %q, %v", out, err)
	}
}

// A result document a worker in another language stored with NaN is
// reported by the result command as that document, naming the field and
// the byte offset.
func TestResultCommandInvalidDocument(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	ctx := ctxFor(t)
	kv, err := s.js.KeyValue(ctx, "spool_results")
	if err != nil {
		t.Fatal(err)
	}
	doc := `{"id":"nan1","type":"a","priority":"normal","state":"completed","attempts":1,"result":NaN}`
	if _, err := kv.PutString(ctx, "nan1", doc); err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf(`the stored result document "nan1" cannot be read: field "result" at byte %d: invalid character 'N' looking for beginning of value`, strings.Index(doc, "NaN")+1)
	for _, args := range [][]string{{"result", "nan1"}, {"result", "--wait", "--timeout", "5s", "nan1"}} {
		if _, err := s.cli(t, "", args...); err == nil || !strings.HasPrefix(err.Error(), want) {
			t.Errorf("%v: %v, want %q", args, err, want)
		}
	}
}

func TestLoadCommand(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	out, err := s.cli(t, "", "load", "--count", "2100", "--mix", "critical=1,high=2,normal=4", "--size", "64", "--batch", "300")
	if err != nil {
		t.Fatalf("load: %v\n%s", err, out)
	}
	if !strings.Contains(out, "load: 2100 enqueued, 0 failed") || !strings.Contains(out, "critical=300 high=600 normal=1200") {
		t.Fatalf("summary %q", out)
	}
	if n := s.streamMsgs(t); n != 2100 {
		t.Fatalf("stream holds %d", n)
	}
	// Rate-limited, by duration: about rate × duration tasks.
	out, err = s.cli(t, "", "load", "--duration", "500ms", "--rate", "200", "--type", "paced", "--progress", "0")
	if err != nil {
		t.Fatalf("paced load: %v\n%s", err, out)
	}
	info, err := s.tasks.Info(ctxFor(t), jetstream.WithSubjectFilter("spool.tasks.normal.paced"))
	if err != nil {
		t.Fatal(err)
	}
	if n := info.State.Subjects["spool.tasks.normal.paced"]; n < 50 || n > 101 {
		t.Fatalf("paced load stored %d tasks, want about 100 (%s)", n, out)
	}
}

func TestParseMix(t *testing.T) {
	t.Parallel()
	cycle, err := parseMix("critical=1,high=2,normal=4")
	if err != nil {
		t.Fatal(err)
	}
	counts := map[spool.Priority]int{}
	for _, p := range cycle {
		counts[p]++
	}
	if len(cycle) != 7 || counts[spool.Critical] != 1 || counts[spool.High] != 2 || counts[spool.Normal] != 4 {
		t.Fatalf("cycle %v", cycle)
	}
	if cycle[0] == cycle[1] && cycle[1] == cycle[2] {
		t.Errorf("mix not interleaved: %v", cycle)
	}
	for _, bad := range []string{"", "urgent=1", "high=x", "high=-1", "high=1,high=2", "low=0"} {
		if _, err := parseMix(bad); err == nil {
			t.Errorf("mix %q accepted", bad)
		}
	}
}

// syncBuffer collects a binary's output while it runs.
type syncBuffer = streamstest.SyncBuffer

func TestServeCommand(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	ctx, cancel := context.WithCancel(ctxFor(t))
	defer cancel()
	var stdout syncBuffer
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"serve", "--url", s.url, "--addr", "127.0.0.1:0"}, strings.NewReader(""), &stdout, t.Output())
	}()
	var base string
	streamstest.WaitFor(t, 10*time.Second, func() error {
		line, _, _ := strings.Cut(stdout.String(), "\n")
		addr, ok := strings.CutPrefix(line, "listening on ")
		if !ok {
			return errors.New("not listening yet")
		}
		base = addr
		return nil
	})
	resp, err := http.Post(base+"/v1/tasks", "application/json", strings.NewReader(`{"type":"via.http","id":"h1"}`))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 201 {
		t.Fatalf("POST: %d %s", resp.StatusCode, body)
	}
	if m := s.lastTask(t, "spool.tasks.normal.via.http"); m.Header.Get("Nats-Msg-Id") != "h1" {
		t.Fatalf("stored %v", m.Header)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("serve: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("serve did not stop")
	}
}

func TestConfigValidation(t *testing.T) {
	t.Parallel()
	base := Config{HTTPAddr: "127.0.0.1:8080", HTTPMaxBody: 2 << 20}
	base.URL = "nats://127.0.0.1:4222"
	base.Prefix = "spool"
	base.LogLevel = "info"
	base.LogFormat = "text"
	if err := base.Validate(); err != nil {
		t.Fatalf("defaults: %v", err)
	}
	if err := base.validateServe(); err != nil {
		t.Fatalf("defaults for serve: %v", err)
	}
	tests := []struct {
		name    string
		mod     func(*Config)
		wantErr string
	}{
		{"addr", func(c *Config) { c.HTTPAddr = "8080" }, "SPOOL_HTTP_ADDR"},
		{"port", func(c *Config) { c.HTTPAddr = "127.0.0.1:99999" }, "SPOOL_HTTP_ADDR"},
		{"off", func(c *Config) { c.HTTPAddr = "off" }, "SPOOL_HTTP_ADDR"},
		{"token", func(c *Config) { c.HTTPToken = "short" }, "SPOOL_HTTP_TOKEN"},
		{"body", func(c *Config) { c.HTTPMaxBody = 10 }, "SPOOL_HTTP_MAX_BODY"},
	}
	for _, tt := range tests {
		c := base
		tt.mod(&c)
		if err := c.Validate(); err != nil {
			t.Errorf("%s: a broker setting failed a command that does not serve: %v", tt.name, err)
		}
		if err := c.validateServe(); err == nil || !strings.Contains(err.Error(), tt.wantErr) {
			t.Errorf("%s: want %s, got %v", tt.name, tt.wantErr, err)
		}
	}
	c := base
	c.Prefix = "a.b"
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "SPOOL_PREFIX") {
		t.Errorf("common: want SPOOL_PREFIX, got %v", err)
	}
}

// One environment points every command at a stack, and SPOOL_HTTP_ADDR=off
// in it leaves the broker out: enqueue and result run as usual, and only
// serve refuses it, saying why.
func TestCommandsRunWithBrokerOff(t *testing.T) {
	t.Setenv("SPOOL_HTTP_ADDR", "off")
	s := startServer(t)
	out, err := s.cli(t, "", "enqueue", "--type", "off.env", "--id", "off-1")
	if err != nil || !strings.Contains(out, "enqueued off-1 on spool.tasks.normal.off.env") {
		t.Fatalf("enqueue with SPOOL_HTTP_ADDR=off: %q, %v", out, err)
	}
	kv, err := s.js.KeyValue(ctxFor(t), "spool_results")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.PutString(ctxFor(t), "off-1", `{"id":"off-1","type":"off.env","priority":"normal","state":"completed","attempts":1,"enqueued_at":"2026-01-01T00:00:00Z"}`); err != nil {
		t.Fatal(err)
	}
	out, err = s.cli(t, "", "result", "off-1")
	if err != nil || !strings.Contains(out, `"state": "completed"`) {
		t.Fatalf("result with SPOOL_HTTP_ADDR=off: %q, %v", out, err)
	}
	_, err = s.cli(t, "", "serve")
	if err == nil || !strings.Contains(err.Error(), `SPOOL_HTTP_ADDR is "off"`) {
		t.Fatalf("serve with SPOOL_HTTP_ADDR=off: want a refusal naming the variable, got %v", err)
	}
}

func TestVariablesAreKnown(t *testing.T) {
	t.Parallel()
	for _, k := range config.Keys(&Config{}) {
		if !slices.Contains(config.Known, k) {
			t.Errorf("%s is missing from config.Known: spool-producer would warn that it is unknown", k)
		}
	}
}

// load publishes demo.echo by default and warns when no consumer serves its
// type, reading the fleet's handlers metadata.
func TestLoadWarnsWhenNoHandler(t *testing.T) {
	t.Parallel()
	s := startServerWith(t, streams.Settings{Consumers: streams.ConsumersByPriority})
	load := func(args ...string) string {
		t.Helper()
		var stdout, stderr bytes.Buffer
		args = append([]string{"load", "--url", s.url, "--count", "3", "--progress", "0"}, args...)
		if err := run(ctxFor(t), args, strings.NewReader(""), &stdout, &stderr); err != nil {
			t.Fatalf("load %v: %v\n%s", args, err, stderr.String())
		}
		return stderr.String()
	}
	if errOut := load(); !strings.Contains(errOut, "no worker is running") {
		t.Errorf("no fleet: stderr %q", errOut)
	}
	info, err := s.tasks.Info(ctxFor(t), jetstream.WithSubjectFilter("spool.tasks.normal.demo.echo"))
	if err != nil {
		t.Fatal(err)
	}
	if n := info.State.Subjects["spool.tasks.normal.demo.echo"]; n != 3 {
		t.Errorf("default type: %d demo.echo tasks, want 3", n)
	}

	// A consumer serving demo.* and remote route billing.>.
	nc, err := nats.Connect(s.url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	svc, err := micro.AddService(nc, micro.Config{Name: fleet.ServiceName, Version: "1.0.0",
		Metadata: map[string]string{fleet.MetadataHandlers: "demo.echo,demo.fail,billing.>"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = svc.Stop() })
	// The service subscribes asynchronously: until the server holds its
	// subscriptions, a discovery request from load's own connection finds
	// no consumer (CI saw exactly that).
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	if errOut := load(); strings.Contains(errOut, "warning") {
		t.Errorf("served type: stderr %q", errOut)
	}
	if errOut := load("--type", "billing.charge.eu"); strings.Contains(errOut, "warning") {
		t.Errorf("type served by a pattern: stderr %q", errOut)
	}
	if errOut := load("--type", "load.test"); !strings.Contains(errOut, `no worker serves type "load.test" (the 1 running serve billing.>, demo.echo, demo.fail)`) {
		t.Errorf("unserved type: stderr %q", errOut)
	}
}

// enqueue stores a task whose type no worker serves, exits 0 and warns on
// stderr; a served type gets no warning.
func TestEnqueueWarnsOfUnservedType(t *testing.T) {
	t.Parallel()
	s := startServerWith(t, streams.Settings{Consumers: streams.ConsumersByPriority})
	enqueue := func(args ...string) (string, string) {
		t.Helper()
		var stdout, stderr bytes.Buffer
		args = append([]string{"enqueue", "--url", s.url}, args...)
		if err := run(ctxFor(t), args, strings.NewReader(""), &stdout, &stderr); err != nil {
			t.Fatalf("enqueue %v: %v\n%s", args, err, stderr.String())
		}
		return stdout.String(), stderr.String()
	}
	out, errOut := enqueue("--type", "mail.send", "--id", "w-1")
	if !strings.HasPrefix(out, "enqueued w-1") || !strings.HasPrefix(errOut, `warning: no worker is running (no spool-consumer process answered): tasks of type "mail.send" wait in the queue until one starts`) {
		t.Errorf("no fleet: stdout %q, stderr %q", out, errOut)
	}

	nc, err := nats.Connect(s.url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	svc, err := micro.AddService(nc, micro.Config{Name: fleet.ServiceName, Version: "1.0.0",
		Metadata: map[string]string{fleet.MetadataHandlers: "demo.echo,billing.>"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = svc.Stop() })
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	if out, errOut := enqueue("--type", "billing.charge", "--id", "w-2"); !strings.HasPrefix(out, "enqueued w-2") || errOut != "" {
		t.Errorf("served type: stdout %q, stderr %q", out, errOut)
	}
	out, errOut = enqueue("--type", "mail.send", "--id", "w-3", "--json")
	want := `no worker serves type "mail.send" (the 1 running serve billing.>, demo.echo): its tasks will be dead-lettered with reason no_handler`
	if errOut != "warning: "+want+"\n" {
		t.Errorf("unserved type: stderr %q", errOut)
	}
	var res struct {
		ID      string `json:"id"`
		Warning string `json:"warning"`
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil || res.ID != "w-3" || res.Warning != want {
		t.Errorf("--json: %s (%v)", out, err)
	}
	if n := s.streamMsgs(t); n != 3 {
		t.Errorf("%d tasks stored, want all 3", n)
	}
}
