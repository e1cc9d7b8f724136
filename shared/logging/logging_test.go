package logging_test

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"

	"github.com/spoolq/spool/shared/logging"
)

func TestJSONLogger(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	l, err := logging.New(&buf, "json", "warn")
	if err != nil {
		t.Fatal(err)
	}
	l.Info("hidden")
	l.Warn("shown", "task_id", "t1")
	var rec map[string]any
	if err := json.Unmarshal(buf.Bytes(), &rec); err != nil {
		t.Fatalf("not one JSON record: %q: %v", buf.String(), err)
	}
	if rec["msg"] != "shown" || rec["task_id"] != "t1" {
		t.Fatalf("record %v", rec)
	}
}

func TestTextLogger(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	l, err := logging.New(&buf, "text", "debug")
	if err != nil {
		t.Fatal(err)
	}
	l.Debug("hello", "n", 1)
	if !strings.Contains(buf.String(), "hello") || !strings.Contains(buf.String(), "n=1") {
		t.Fatalf("text output %q", buf.String())
	}
}

func TestBadSettings(t *testing.T) {
	t.Parallel()
	if _, err := logging.New(&bytes.Buffer{}, "xml", "info"); err == nil {
		t.Error("format xml accepted")
	}
	if _, err := logging.New(&bytes.Buffer{}, "json", "verbose"); err == nil {
		t.Error("level verbose accepted")
	}
}

func TestOrDefault(t *testing.T) {
	t.Parallel()
	l := slog.New(slog.DiscardHandler)
	if logging.OrDefault(l) != l {
		t.Error("a given logger was replaced")
	}
	d := logging.OrDefault(nil)
	ctx := t.Context()
	if !d.Enabled(ctx, slog.LevelWarn) || !d.Enabled(ctx, slog.LevelError) || d.Enabled(ctx, slog.LevelInfo) {
		t.Error("the default logger must keep warnings and errors and drop info")
	}
}
