package deployconf_test

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/nats-io/nats-server/v2/server"
)

var deployDir = filepath.Join("..", "..", "deploy", "nats")

// secretVars are the password variables auth.conf reads from
// spool-secrets.conf.
var secretVars = []string{
	"SPOOL_SYS_PASSWORD", "SPOOL_ADMIN_PASSWORD", "SPOOL_PRODUCER_PASSWORD",
	"SPOOL_BROKER_PASSWORD", "SPOOL_CONSUMER_PASSWORD", "SPOOL_HANDLER_PASSWORD",
	"SPOOL_WORKER_BILLING_PASSWORD",
}

// copyConfigs copies deploy/nats/*.conf, without any local
// spool-secrets.conf, into a fresh directory. With secrets, it writes a
// spool-secrets.conf whose passwords are the variable names in lower case.
func copyConfigs(t *testing.T, secrets bool) string {
	t.Helper()
	dir := t.TempDir()
	files, err := filepath.Glob(filepath.Join(deployDir, "*.conf"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if filepath.Base(f) == "spool-secrets.conf" {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, filepath.Base(f)), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if secrets {
		var b strings.Builder
		for _, v := range secretVars {
			fmt.Fprintf(&b, "%s: %q\n", v, strings.ToLower(v))
		}
		if err := os.WriteFile(filepath.Join(dir, "spool-secrets.conf"), []byte(b.String()), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

var authConfigs = []string{"single-auth.conf", "cluster-n1-auth.conf", "cluster-n2-auth.conf", "cluster-n3-auth.conf"}

// TestAuthConfigsNeedSecrets: without spool-secrets.conf the server refuses
// the configuration instead of starting without passwords.
func TestAuthConfigsNeedSecrets(t *testing.T) {
	t.Parallel()
	dir := copyConfigs(t, false)
	for _, f := range authConfigs {
		_, err := server.ProcessConfigFile(filepath.Join(dir, f))
		if err == nil || !strings.Contains(err.Error(), "spool-secrets.conf") {
			t.Errorf("%s without spool-secrets.conf: error %v, want one naming spool-secrets.conf", f, err)
		}
	}
}

// TestExampleSecretsDefineEveryVariable: the example parses in place of the
// real file, and every value is a placeholder shaped like a bcrypt hash (so
// it matches no password).
func TestExampleSecretsDefineEveryVariable(t *testing.T) {
	t.Parallel()
	dir := copyConfigs(t, false)
	example, err := os.ReadFile(filepath.Join(deployDir, "spool-secrets.example.conf"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "spool-secrets.conf"), example, 0o600); err != nil {
		t.Fatal(err)
	}
	o, err := server.ProcessConfigFile(filepath.Join(dir, "single-auth.conf"))
	if err != nil {
		t.Fatalf("single-auth.conf with the example secrets: %v", err)
	}
	for _, u := range o.Users {
		if !strings.HasPrefix(u.Password, "$2a$11$REPLACE") {
			t.Errorf("user %s: example password %q is not the bcrypt-shaped placeholder", u.Username, u.Password)
		}
	}
}

func TestAuthConfigs(t *testing.T) {
	t.Parallel()
	dir := copyConfigs(t, true)
	wantUsers := map[string]string{
		"sys": "SYS", "spool-admin": "SPOOL", "spool-producer": "SPOOL",
		"spool-broker": "SPOOL", "spool-consumer": "SPOOL", "spool-handler": "SPOOL",
		"spool-worker-billing": "SPOOL",
	}
	for _, f := range authConfigs {
		t.Run(f, func(t *testing.T) {
			t.Parallel()
			o, err := server.ProcessConfigFile(filepath.Join(dir, f))
			if err != nil {
				t.Fatalf("parsing %s: %v", f, err)
			}
			if !o.JetStream || !o.SyncAlways {
				t.Errorf("JetStream %v, sync always %v: the auth variant must stay durable", o.JetStream, o.SyncAlways)
			}
			if strings.HasPrefix(f, "cluster") && len(o.Routes) != 3 {
				t.Errorf("%d routes, want 3", len(o.Routes))
			}
			if o.NoAuthUser != "" {
				t.Errorf("no_auth_user %q lets anonymous clients in", o.NoAuthUser)
			}
			if o.SystemAccount != "SYS" {
				t.Errorf("system account %q, want SYS", o.SystemAccount)
			}
			got := map[string]string{}
			for _, u := range o.Users {
				got[u.Username] = u.Account.Name
				role := strings.ReplaceAll(strings.TrimPrefix(u.Username, "spool-"), "-", "_")
				if want := strings.ToLower("SPOOL_" + role + "_PASSWORD"); u.Password != want {
					t.Errorf("user %s: password %q, want the value of its variable (%q)", u.Username, u.Password, want)
				}
			}
			if fmt.Sprint(got) != fmt.Sprint(wantUsers) {
				t.Errorf("users %v, want %v", got, wantUsers)
			}
		})
	}
}

// TestRolesDenyByConstruction checks the allow lists of auth.conf against
// subjects each role must never publish to, including API calls the
// security tests do not exercise one by one.
func TestRolesDenyByConstruction(t *testing.T) {
	t.Parallel()
	o, err := server.ProcessConfigFile(filepath.Join(copyConfigs(t, true), "single-auth.conf"))
	if err != nil {
		t.Fatal(err)
	}
	perms := map[string]*server.Permissions{}
	for _, u := range o.Users {
		perms[u.Username] = u.Permissions
	}
	changeTopology := []string{
		"$JS.API.STREAM.CREATE.SPOOL_TASKS", "$JS.API.STREAM.UPDATE.SPOOL_TASKS",
		"$JS.API.STREAM.DELETE.SPOOL_TASKS", "$JS.API.STREAM.PURGE.SPOOL_TASKS",
		"$JS.API.STREAM.UPDATE.SPOOL_DLQ", "$JS.API.STREAM.DELETE.SPOOL_DLQ", "$JS.API.STREAM.PURGE.SPOOL_DLQ",
		"$JS.API.STREAM.CREATE.KV_spool_results", "$JS.API.STREAM.DELETE.KV_spool_results",
		"$JS.API.STREAM.PURGE.KV_spool_unique", "$JS.API.STREAM.SNAPSHOT.SPOOL_TASKS",
		"$JS.API.STREAM.RESTORE.SPOOL_TASKS",
		"$JS.API.CONSUMER.CREATE.SPOOL_TASKS.x", "$JS.API.CONSUMER.CREATE.SPOOL_TASKS.x.spool.tasks.high.x",
		"$JS.API.CONSUMER.DURABLE.CREATE.SPOOL_TASKS.x", "$JS.API.CONSUMER.DELETE.SPOOL_TASKS.spool-high",
		"$JS.API.CONSUMER.CREATE.SPOOL_ADVISORIES.x", "$JS.API.CONSUMER.DELETE.SPOOL_ADVISORIES.spool-dlq-router",
		"$JS.API.CONSUMER.PAUSE.SPOOL_TASKS.spool-high", "$JS.API.CONSUMER.UNPIN.SPOOL_TASKS.spool-high",
		"$JS.API.ACCOUNT.PURGE.SPOOL", "$JS.API.META.LEADER.STEPDOWN", "$JS.API.STREAM.LEADER.STEPDOWN.SPOOL_TASKS",
		"$SYS.REQ.SERVER.PING",
	}
	forbidden := map[string][]string{
		"spool-producer": append([]string{
			"$JS.API.CONSUMER.MSG.NEXT.SPOOL_TASKS.spool-high",
			"$JS.API.CONSUMER.MSG.NEXT.SPOOL_ADVISORIES.spool-dlq-router",
			"$JS.ACK.SPOOL_TASKS.spool-high.1.1.1.1.0",
			"$KV.spool_results.task-1", "spool.dlq.high.x", "spool.remote.x",
			"$JS.API.STREAM.INFO.SPOOL_DLQ", "$JS.API.DIRECT.GET.SPOOL_DLQ",
			"$JS.API.DIRECT.GET.SPOOL_TASKS", "$JS.API.STREAM.MSG.GET.SPOOL_TASKS",
			"$JS.API.DIRECT.GET.SPOOL_TASKS.spool.tasks.high.x",
			"$JS.API.CONSUMER.CREATE.KV_spool_unique.x",
			// Cancelling, pausing and periodic schedules are operators' actions.
			"$KV.spool_cancel.task-1", "$JS.API.STREAM.MSG.DELETE.SPOOL_TASKS", "spool.cron.nightly",
			"$KV.spool_paused.email", "spool.parked.high.email",
		}, changeTopology...),
		// A worker publishes tasks and schedules: the steps of a workflow
		// that became ready, and a task waiting for a flow-control limit,
		// handed back as a schedule.
		// Where workers pull by type it makes, lists and pauses task
		// consumers of any name, with a filter under one priority's
		// spool.tasks.<priority>.> only.
		"spool-consumer": append([]string{
			"$JS.API.CONSUMER.MSG.NEXT.SPOOL_DLQ.x", "$JS.API.DIRECT.GET.SPOOL_DLQ",
			"$JS.API.CONSUMER.CREATE.KV_spool_results.x",
			"$KV.spool_cancel.task-1", "spool.cron.nightly",
			// It reads type pauses, never writes them.
			"$KV.spool_paused.email",
			"$JS.API.CONSUMER.CREATE.SPOOL_TASKS.x.spool.held.>", "$JS.API.CONSUMER.CREATE.SPOOL_TASKS.x.spool.sched.x",
			"$JS.API.CONSUMER.CREATE.SPOOL_TASKS.x.spool.parked.high.x",
			// A task consumer's filter stays under one priority.
			"$JS.API.CONSUMER.CREATE.SPOOL_TASKS.x.spool.tasks.*.x", "$JS.API.CONSUMER.CREATE.SPOOL_TASKS.x.spool.tasks.>",
			"$JS.API.CONSUMER.CREATE.SPOOL_TASKS.x.spool.tasks.urgent.x",
			// It reads pauses from spool_paused; only the broker lists.
			"$JS.API.CONSUMER.LIST.SPOOL_TASKS",
		}, slices.DeleteFunc(slices.Clone(changeTopology), func(s string) bool {
			return s == "$JS.API.CONSUMER.CREATE.SPOOL_TASKS.x.spool.tasks.high.x" || s == "$JS.API.CONSUMER.PAUSE.SPOOL_TASKS.spool-high"
		})...),
		// A worker of billing.* and invoice.send reaches only the
		// consumers of these patterns, and has no DLQ router rights.
		"spool-worker-billing": append([]string{
			"$JS.API.CONSUMER.MSG.NEXT.SPOOL_TASKS.spool-high",
			"$JS.API.CONSUMER.MSG.NEXT.SPOOL_TASKS.spool-normal-shop~order",
			"$JS.API.CONSUMER.MSG.NEXT.SPOOL_TASKS.spool-high-billing~charge",
			"$JS.API.CONSUMER.INFO.SPOOL_TASKS.spool-normal-shop~order",
			"$JS.API.CONSUMER.PAUSE.SPOOL_TASKS.spool-normal-shop~order",
			"$JS.API.CONSUMER.CREATE.SPOOL_TASKS.spool-normal-shop~+.spool.tasks.normal.shop.*",
			"$JS.API.CONSUMER.CREATE.SPOOL_TASKS.spool-high-billing~+.spool.tasks.high.shop.order",
			"$JS.API.CONSUMER.CREATE.SPOOL_TASKS.spool-high-billing~+",
			"$JS.API.CONSUMER.CREATE.SPOOL_TASKS.spool-high-invoice~send.spool.tasks.high.invoice.*",
			"$JS.ACK.SPOOL_TASKS.spool-normal-shop~order.1.1.1.1.0", "$JS.ACK.SPOOL_TASKS.spool-high.1.1.1.1.0",
			"$JS.API.STREAM.INFO.SPOOL_ADVISORIES", "$JS.API.CONSUMER.NAMES.SPOOL_TASKS",
			"$JS.API.CONSUMER.LIST.SPOOL_TASKS",
			"$JS.API.CONSUMER.INFO.SPOOL_ADVISORIES.spool-dlq-router",
			"$JS.API.CONSUMER.MSG.NEXT.SPOOL_ADVISORIES.spool-dlq-router",
			"$JS.ACK.SPOOL_ADVISORIES.spool-dlq-router.1.1.1.1.0",
			"spool.remote.shop.order", "spool.remote.billing.a.b",
			"$JS.API.CONSUMER.MSG.NEXT.SPOOL_DLQ.x", "$JS.API.DIRECT.GET.SPOOL_DLQ",
			"$JS.API.CONSUMER.CREATE.KV_spool_results.x",
			"$KV.spool_cancel.task-1", "spool.cron.nightly", "$KV.spool_paused.email",
		}, changeTopology...),
		"spool-handler": {"spool.tasks.high.x", "$JS.API.INFO", "spool.remote.x", "_INBOX.x"},
		// The broker purges the DLQ and pauses priorities; nothing else of
		// the topology.
		"spool-broker": append([]string{
			"$JS.API.CONSUMER.MSG.NEXT.SPOOL_TASKS.spool-high",
			"$JS.API.CONSUMER.MSG.NEXT.SPOOL_ADVISORIES.spool-dlq-router",
			"$JS.ACK.SPOOL_TASKS.spool-high.1.1.1.1.0",
			"spool.dlq.high.x", "spool.remote.x", "$SRV.STATS", "$SRV.PING",
		}, slices.DeleteFunc(slices.Clone(changeTopology), func(s string) bool {
			return s == "$JS.API.STREAM.PURGE.SPOOL_DLQ" || s == "$JS.API.CONSUMER.PAUSE.SPOOL_TASKS.spool-high"
		})...),
	}
	for user, subjects := range forbidden {
		p := perms[user]
		if p == nil || p.Publish == nil {
			t.Errorf("%s has no publish permissions: it may publish anything", user)
			continue
		}
		if len(p.Publish.Allow) == 0 && user != "spool-handler" {
			t.Errorf("%s has no publish allow list", user)
		}
		for _, subject := range subjects {
			for _, allow := range p.Publish.Allow {
				if matches(allow, subject) {
					t.Errorf("%s may publish to %s (allowed by %q)", user, subject, allow)
				}
			}
		}
	}
	if p := perms["spool-producer"]; p == nil || p.Subscribe == nil || !slices.Equal(p.Subscribe.Allow, []string{"_INBOX.>", "spool.events.>"}) {
		t.Errorf("spool-producer subscribe permissions %+v, want _INBOX.> and spool.events.> only", p)
	}
	// The consumer also answers the NATS service API (nats micro),
	// watches the flow-control slots and the publishes of tasks (to wake
	// its idle consumers), and only that: it replies, it does not listen
	// to remote calls.
	serviceSubs := []string{
		"_INBOX.>",
		"$SRV.PING", "$SRV.PING.spool-consumer", "$SRV.PING.spool-consumer.*",
		"$SRV.INFO", "$SRV.INFO.spool-consumer", "$SRV.INFO.spool-consumer.*",
		"$SRV.STATS", "$SRV.STATS.spool-consumer", "$SRV.STATS.spool-consumer.*",
		"spool.svc.consumer.>",
		// Cancellations of the tasks it runs; remote handlers' progress.
		"$KV.spool_cancel.>",
		"spool.progress.>",
		// Pauses and resumes of task types.
		"$KV.spool_paused.>",
		// Flow control: changes of the concurrency slots.
		"$KV.spool_leases.c.>", "$KV.spool_leases.kc.>",
		// Producers' requests to start an ordered or fair key.
		"spool.kick.>",
	}
	consumerSubs := append(slices.Clone(serviceSubs), "spool.tasks.>", "spool.part.*.tasks.>")
	billingSubs := append(slices.Clone(serviceSubs),
		"spool.tasks.*.billing.*", "spool.part.*.tasks.*.billing.*",
		"spool.tasks.*.invoice.send", "spool.part.*.tasks.*.invoice.send",
		"spool.tasks.*._spool.workflow.submit", "spool.part.*.tasks.*._spool.workflow.submit")
	if p := perms["spool-consumer"]; p == nil || p.Subscribe == nil || !slices.Equal(p.Subscribe.Allow, consumerSubs) || p.Response == nil {
		t.Errorf("spool-consumer subscribe permissions %+v, want %v and responses", p, consumerSubs)
	}
	if p := perms["spool-worker-billing"]; p == nil || p.Subscribe == nil || !slices.Equal(p.Subscribe.Allow, billingSubs) || p.Response == nil {
		t.Errorf("spool-worker-billing subscribe permissions %+v, want spool-consumer's narrowed to its types: %v and responses", p, billingSubs)
	}
	if p := perms["spool-handler"]; p == nil || p.Response == nil {
		t.Errorf("spool-handler cannot reply: %+v", p)
	}
}

// matches reports whether a literal subject matches a NATS filter with the
// * and > wildcards.
func matches(filter, subject string) bool {
	f, s := strings.Split(filter, "."), strings.Split(subject, ".")
	for i, tok := range f {
		if tok == ">" {
			return len(s) > i
		}
		if i >= len(s) || (tok != "*" && tok != s[i]) {
			return false
		}
	}
	return len(f) == len(s)
}

func TestMatches(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		filter, subject string
		want            bool
	}{
		{">", "a", true},
		{"a.>", "a", false},
		{"a.>", "a.b.c", true},
		{"a.*", "a.b", true},
		{"a.*", "a.b.c", false},
		{"a.b", "a.b", true},
		{"a.b", "a.c", false},
		{"$JS.API.DIRECT.GET.SPOOL_TASKS.spool.sched.>", "$JS.API.DIRECT.GET.SPOOL_TASKS", false},
	} {
		if got := matches(tt.filter, tt.subject); got != tt.want {
			t.Errorf("matches(%q, %q) = %v, want %v", tt.filter, tt.subject, got, tt.want)
		}
	}
}
