package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/spoolq/spool/streams/embedded"
)

func TestScheduleCommands(t *testing.T) {
	s, err := embedded.Start(embedded.Options{StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	t.Setenv("SPOOL_LOG_LEVEL", "warn")
	cli := func(args ...string) (string, error) {
		var out, errOut bytes.Buffer
		err := run(t.Context(), append(args, "--url", s.ClientURL()), &out, &errOut)
		return out.String(), err
	}
	if _, err := cli("provision"); err != nil {
		t.Fatal(err)
	}
	out, err := cli("schedule", "set", "nightly", "--spec", "0 3 * * *", "--tz", "Europe/Paris", "--type", "report.build", "--priority", "low", "--payload", `{"kind":"nightly"}`)
	if err != nil || !strings.HasPrefix(out, "schedule nightly set: 0 0 3 * * * → low.report.build, next run 20") {
		t.Fatalf("set: %q, %v", out, err)
	}
	if out, err := cli("schedule", "list"); err != nil || !strings.Contains(out, "nightly") || !strings.Contains(out, "Europe/Paris") || !strings.Contains(out, "active") {
		t.Fatalf("list: %q, %v", out, err)
	}
	if out, err := cli("schedule", "pause", "nightly"); err != nil || out != "schedule nightly paused\n" {
		t.Fatalf("pause: %q, %v", out, err)
	}
	if out, err := cli("schedule", "list", "--json"); err != nil || !strings.Contains(out, `"paused": true`) {
		t.Fatalf("list --json: %q, %v", out, err)
	}
	if out, err := cli("schedule", "resume", "nightly"); err != nil || out != "schedule nightly resumed\n" {
		t.Fatalf("resume: %q, %v", out, err)
	}
	if out, err := cli("schedule", "delete", "nightly"); err != nil || out != "schedule nightly deleted\n" {
		t.Fatalf("delete: %q, %v", out, err)
	}
	if out, err := cli("schedule", "list"); err != nil || out != "no schedules\n" {
		t.Fatalf("list after delete: %q, %v", out, err)
	}
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"schedule", "delete", "nightly"}, "schedule not found"},
		{[]string{"schedule", "set", "x", "--type", "t"}, "needs --spec and --type"},
		{[]string{"schedule", "set", "x", "--spec", "@every 10ms", "--type", "t"}, "at least 1s"},
		{[]string{"schedule", "set", "x", "--spec", "@daily", "--type", "t", "--priority", "urgent"}, "--priority"},
		{[]string{"schedule", "frobnicate"}, "unknown schedule command"},
		{[]string{"schedule", "pause"}, "takes one schedule name"},
	} {
		if _, err := cli(tt.args...); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%v: %v, want %q", tt.args, err, tt.want)
		}
	}
}
