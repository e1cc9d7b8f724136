package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	spool "github.com/spoolq/spool/shared"
	"github.com/spoolq/spool/shared/config"
	"github.com/spoolq/spool/streams"
	"github.com/spoolq/spool/streams/admin"
	"github.com/spoolq/spool/streams/embedded"
	"github.com/spoolq/spool/streams/streamstest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func TestProvisionThenStatus(t *testing.T) {
	s, err := embedded.Start(embedded.Options{StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	t.Setenv("SPOOL_LOG_LEVEL", "warn")

	var out, errOut bytes.Buffer
	if err := run(t.Context(), []string{"provision", "--url", s.ClientURL()}, &out, &errOut); err != nil {
		t.Fatalf("provision: %v\n%s", err, errOut.String())
	}
	if !strings.Contains(out.String(), "SPOOL_TASKS") {
		t.Fatalf("provision output %q", out.String())
	}

	out.Reset()
	if err := run(t.Context(), []string{"status", "--json", "--url", s.ClientURL()}, &out, &errOut); err != nil {
		t.Fatalf("status: %v\n%s", err, errOut.String())
	}
	var st admin.Status
	if err := json.Unmarshal(out.Bytes(), &st); err != nil {
		t.Fatalf("status --json is not JSON: %v\n%s", err, out.String())
	}
	if len(st.Priorities) != 5 || st.Priorities[0].Priority.String() != "critical" {
		t.Fatalf("status %+v", st)
	}

	// A flow-control rule shows with its use in the status and in limits ls.
	if err := run(t.Context(), []string{"limits", "set", "--type", "email.send", "--concurrency", "3", "--rate", "10/1s", "--url", s.ClientURL()}, &out, &errOut); err != nil {
		t.Fatalf("limits set: %v\n%s", err, errOut.String())
	}
	out.Reset()
	if err := run(t.Context(), []string{"limits", "ls", "--url", s.ClientURL()}, &out, &errOut); err != nil {
		t.Fatalf("limits ls: %v\n%s", err, errOut.String())
	}
	for _, want := range []string{"busiest keys", "email.send", "0 / 3", "10/1s", "below the limit"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("limits ls lacks %q:\n%s", want, out.String())
		}
	}
	out.Reset()
	if err := run(t.Context(), []string{"status", "--url", s.ClientURL()}, &out, &errOut); err != nil {
		t.Fatalf("status: %v", err)
	}
	for _, want := range []string{"priority", "idle", "dead letters", "flow-control limits", "email.send", "0 / 3"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("status table lacks %q:\n%s", want, out.String())
		}
	}
}

func TestBadInvocations(t *testing.T) {
	tests := []struct {
		args    []string
		wantErr string
	}{
		{nil, "no command"},
		{[]string{"frobnicate"}, "unknown command"},
		{[]string{"status", "extra"}, "takes no arguments"},
		{[]string{"status", "--timeout", "-1s"}, "--timeout"},
		{[]string{"status", "--url", "localhost"}, `--url: "localhost" has no scheme`},
		{[]string{"status", "--bogus"}, "unknown flag --bogus (spool-admin status --help lists the flags)"},
		{[]string{"status", "--timeout", "soon"}, `--timeout: "soon" is not a duration`},
	}
	for _, tt := range tests {
		var out, errOut bytes.Buffer
		err := run(t.Context(), tt.args, &out, &errOut)
		if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
			t.Errorf("run(%q) = %v, want an error containing %q", tt.args, err, tt.wantErr)
		}
	}
}

func TestStatusCountsTasks(t *testing.T) {
	s, err := embedded.Start(embedded.Options{StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	t.Setenv("SPOOL_LOG_LEVEL", "warn")
	t.Setenv("SPOOL_CONSUMERS", "priority") // counts of the priority consumers
	var out, errOut bytes.Buffer
	if err := run(t.Context(), []string{"provision", "--url", s.ClientURL()}, &out, &errOut); err != nil {
		t.Fatal(err)
	}
	nc, js := connect(t, s.ClientURL())
	defer nc.Close()
	for range 3 {
		if _, err := js.Publish(t.Context(), "spool.tasks.low.report", []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	// A consumer's pending count follows the stream's stores a moment
	// later (the server signals consumers from a goroutine of its own).
	streamstest.WaitFor(t, 10*time.Second, func() error {
		out.Reset()
		if err := run(t.Context(), []string{"status", "--json", "--url", s.ClientURL()}, &out, &errOut); err != nil {
			t.Fatal(err)
		}
		var st admin.Status
		if err := json.Unmarshal(out.Bytes(), &st); err != nil {
			t.Fatal(err)
		}
		if low := st.Priorities[3]; low.Pending != 3 || low.OldestWait <= 0 {
			return fmt.Errorf("low priority status %+v: want 3 pending with an oldest wait", low)
		}
		return nil
	})
}

func TestVariablesAreKnown(t *testing.T) {
	for _, k := range config.Keys(&Config{}) {
		if !slices.Contains(config.Known, k) {
			t.Errorf("%s is missing from config.Known: spool-admin would warn that it is unknown", k)
		}
	}
}

// Where workers pull by type, status lists the queued task types no
// worker serves, with their count and oldest wait, in both outputs.
func TestStatusShowsUnserved(t *testing.T) {
	t.Setenv("SPOOL_LOG_LEVEL", "warn")
	t.Setenv("SPOOL_CONSUMERS", "type")
	url, spoolAdmin := startAdmin(t)
	if _, err := spoolAdmin("provision"); err != nil {
		t.Fatal(err)
	}
	nc, js := connect(t, url)
	defer nc.Close()
	ctx := t.Context()
	tasks, err := js.Stream(ctx, "SPOOL_TASKS")
	if err != nil {
		t.Fatal(err)
	}
	// A raw worker serving report.* makes its consumer; mail.send has none.
	cfg := streams.TypeConsumerConfig(spool.DefaultNames(), tasks.CachedInfo().Config, spool.Low, "report.*")
	if _, err := tasks.CreateConsumer(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	for _, subject := range []string{"spool.tasks.low.report.daily", "spool.tasks.low.mail.send", "spool.tasks.low.mail.send"} {
		if _, err := js.Publish(ctx, subject, []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	out, err := spoolAdmin("status", "--json")
	if err != nil {
		t.Fatal(err)
	}
	var st admin.Status
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		t.Fatal(err)
	}
	if len(st.Unserved) != 1 || st.Unserved[0].Type != "mail.send" || st.Unserved[0].Queued != 2 || st.Unserved[0].OldestWait <= 0 {
		t.Errorf("status --json unserved %+v, want mail.send with 2 queued", st.Unserved)
	}
	out, err = spoolAdmin("status")
	if err != nil {
		t.Fatal(err)
	}
	_, table, ok := strings.Cut(out, "task types no worker serves")
	if !ok {
		t.Fatalf("status lacks the unserved types:\n%s", out)
	}
	if !regexp.MustCompile(`mail\.send\s+low\s+2\s+\d`).MatchString(table) || strings.Contains(table, "report.daily") {
		t.Errorf("unserved table:\n%s", table)
	}
}
