package cli

import (
	"bytes"
	"errors"
	"flag"
	"strings"
	"testing"
	"time"
)

func TestParseExplainsBadFlags(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		args    []string
		wantErr string
	}{
		{"int", []string{"--count", "abc"}, `--count: "abc" is not a whole number`},
		{"int out of range", []string{"--count", "99999999999999999999"}, `--count: "99999999999999999999" is not a whole number`},
		{"duration", []string{"--timeout", "5"}, `--timeout: "5" is not a duration such as 500ms, 30s, 5m or 1h`},
		{"bool", []string{"--json=maybe"}, `--json: "maybe" is not true or false`},
		{"unknown", []string{"--nope"}, "unknown flag --nope (cmd --help lists the flags)"},
		{"missing value", []string{"--count"}, "--count needs a value (a whole number)"},
		{"custom", []string{"--mode", "x"}, "--mode: x is not a mode"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			fs := NewFlagSet("cmd")
			fs.Int("count", 0, "")
			fs.Duration("timeout", time.Second, "")
			fs.Bool("json", false, "")
			fs.Func("mode", "", func(s string) error { return errors.New(s + " is not a mode") })
			err := Parse(fs, tt.args)
			if err == nil || err.Error() != tt.wantErr {
				t.Fatalf("got %v, want %s", err, tt.wantErr)
			}
		})
	}
}

func TestHelpIsNotAnError(t *testing.T) {
	t.Parallel()
	fs := NewFlagSet("cmd")
	err := Parse(fs, []string{"--help"})
	if !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("got %v", err)
	}
	var stderr bytes.Buffer
	if code := Exit(&stderr, "cmd", err); code != 0 || stderr.Len() != 0 {
		t.Fatalf("exit %d, stderr %q", code, stderr.String())
	}
	if code := Exit(&stderr, "cmd", errors.New("boom")); code != 1 || stderr.String() != "cmd: boom\n" {
		t.Fatalf("exit %d, stderr %q", code, stderr.String())
	}
}

func TestPrintFlagsShowsOneDefault(t *testing.T) {
	t.Parallel()
	fs := NewFlagSet("cmd")
	fs.Int("retries", -1, "retries (default: the consumer's)")
	fs.Duration("timeout", time.Minute, "how long")
	fs.String("url", "", "server URL")
	var b bytes.Buffer
	PrintFlags(&b, fs)
	out := b.String()
	for _, want := range []string{"--retries int", "(default: the consumer's)\n", "--timeout duration", "how long (default 1m0s)", "--url string"} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q in\n%s", want, out)
		}
	}
	if strings.Contains(out, "(default -1)") {
		t.Errorf("two defaults in\n%s", out)
	}
}

func TestLogLevel(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		configured string
		verbose    bool
		want       string
	}{{"info", false, "warn"}, {"debug", false, "warn"}, {"error", false, "error"}, {"info", true, "info"}, {"debug", true, "debug"}} {
		if got := LogLevel(tt.configured, tt.verbose); got != tt.want {
			t.Errorf("LogLevel(%q, %v) = %q, want %q", tt.configured, tt.verbose, got, tt.want)
		}
	}
}
