package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/spoolq/spool/streams/embedded"
)

func TestPauseAndResumeCommands(t *testing.T) {
	cli := provisionedCLI(t)
	if out, err := cli("pause", "low"); err != nil || out != "paused low until resumed\n" {
		t.Fatalf("pause: %q, %v", out, err)
	}
	if out, err := cli("pause", "--for", "1h", "idle"); err != nil || !strings.HasPrefix(out, "paused idle until 20") {
		t.Fatalf("pause --for: %q, %v", out, err)
	}
	out, err := cli("status")
	if err != nil || !strings.Contains(out, "until resumed") {
		t.Fatalf("status while paused: %q, %v", out, err)
	}
	if out, err := cli("resume", "low"); err != nil || out != "resumed low\n" {
		t.Fatalf("resume: %q, %v", out, err)
	}
	if out, err := cli("status"); err != nil || strings.Contains(out, "until resumed") {
		t.Fatalf("status after resume: %q, %v", out, err)
	}
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"pause"}, "takes one priority"},
		{[]string{"pause", "urgent"}, "is not one of critical"},
		{[]string{"pause", "--for", "1h", "--until", "2999-01-01T00:00:00Z", "low"}, "give one of them"},
		{[]string{"pause", "--until", "tomorrow", "low"}, "want an RFC 3339 time"},
		{[]string{"pause", "--until", "2001-01-01T00:00:00Z", "low"}, "the time is past"},
		{[]string{"resume", "urgent"}, "is not one of critical"},
	} {
		if _, err := cli(tt.args...); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%v: %v, want %q", tt.args, err, tt.want)
		}
	}
}

func TestPauseTypeCommands(t *testing.T) {
	cli := provisionedCLI(t)
	if out, err := cli("pause", "type", "email.send", "--reason", "smtp down", "--by", "ops"); err != nil || out != "paused type email.send until resumed\n" {
		t.Fatalf("pause type: %q, %v", out, err)
	}
	if out, err := cli("pause", "--for", "1h", "type", "report"); err != nil || !strings.HasPrefix(out, "paused type report until 20") {
		t.Fatalf("pause type --for: %q, %v", out, err)
	}
	out, err := cli("status")
	if err != nil || !strings.Contains(out, "email.send") || !strings.Contains(out, "smtp down") || !strings.Contains(out, "ops") {
		t.Fatalf("status while a type is paused: %q, %v", out, err)
	}
	if out, err := cli("resume", "type", "email.send"); err != nil || !strings.HasPrefix(out, "resumed type email.send") {
		t.Fatalf("resume type: %q, %v", out, err)
	}
	if out, err := cli("status"); err != nil || strings.Contains(out, "email.send") || !strings.Contains(out, "report") {
		t.Fatalf("status after resume: %q, %v", out, err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"pause", "type", "bad type"}, "invalid task type"},
		{[]string{"pause", "type", "a", "b"}, "takes one priority"},
		{[]string{"resume", "type", "a..b"}, "empty token"},
		{[]string{"pause", "--until", "2001-01-01T00:00:00Z", "type", "report"}, "the time is past"},
	} {
		_, err := cli(tc.args...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want an error containing %q", tc.args, err, tc.want)
		}
	}
}

// provisionedCLI starts a server owned by t, provisions it, and returns a
// runner of spool-admin commands against it (standard output and error).
func provisionedCLI(t *testing.T) func(args ...string) (string, error) {
	t.Helper()
	s, err := embedded.Start(embedded.Options{StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	t.Setenv("SPOOL_LOG_LEVEL", "warn")
	url := s.ClientURL()
	cli := func(args ...string) (string, error) {
		var out, errOut bytes.Buffer
		err := run(t.Context(), append(args, "--url", url), &out, &errOut)
		return out.String(), err
	}
	if _, err := cli("provision"); err != nil {
		t.Fatal(err)
	}
	return cli
}
