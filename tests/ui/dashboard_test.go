package ui_test

import (
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/spoolq/spool/consumer"
	"github.com/spoolq/spool/streams/embedded"
	"github.com/spoolq/spool/tests/devstack"
)

const token = "ui-e2e-token"

// post sends a JSON body to the broker with the token and returns the
// status.
func post(t *testing.T, ctx context.Context, url, body string) int {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("POST %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode >= 300 {
		t.Fatalf("POST %s: %d %s", url, resp.StatusCode, b)
	}
	return resp.StatusCode
}

// numberIn is a JavaScript expression: the number shown by the element sel
// (commas and suffixes dropped), NaN when it shows none.
func numberIn(sel string) string {
	return fmt.Sprintf(`parseFloat((document.querySelector(%s)?.textContent || "").replace(/,/g, ""))`, jsString(sel))
}

// TestDashboard drives the dashboard in headless Chromium against the dev
// stack: the token prompt, figures that move while tasks flow, the fleet,
// a dead letter found, opened and replayed, a task looked up by id, no
// request leaving the broker's origin, and the banner when NATS goes away.
func TestDashboard(t *testing.T) {
	// The walk's steps take about 50 s of waits; on a loaded machine the
	// whole walk has run past 90 s.
	ctx, cancel := context.WithTimeout(t.Context(), 150*time.Second)
	defer cancel()
	storeDir := t.TempDir()
	st, err := devstack.Start(ctx, devstack.Options{
		StoreDir: storeDir,
		Logger:   slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn})),
		Worker:   true,
		WorkerOptions: []consumer.Option{
			consumer.WithConcurrency(4, 4),
			consumer.WithRetry(20*time.Millisecond, 100*time.Millisecond, 3),
		},
		BrokerAddr:  "127.0.0.1:0",
		BrokerToken: token,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Stop)
	b := startBrowser(t)

	// 1. The page loads and asks for the token; with it, it goes live.
	b.do("loading /ui", 15*time.Second,
		chromedp.Navigate(st.BrokerURL+"/ui"),
		chromedp.WaitVisible(chromedp.CSS("#token-form")),
		chromedp.SendKeys(chromedp.CSS("#token-input"), token),
		press(`#token-form button[type="submit"]`),
	)
	b.waitJS("the page to go live", `document.querySelector("#conn").textContent === "live"`, 10*time.Second)
	b.waitJS("five priority rows", `document.querySelectorAll("#prio-table tbody tr").length === 5`, 5*time.Second)
	// The dev stack registers its worker as the spool-consumer service.
	b.waitJS("the fleet member", `[...document.querySelectorAll("#fleet-table tbody tr")].some(r => r.textContent.includes("spool-dev-worker"))`, 10*time.Second)
	if n := eval[int](b, `document.querySelectorAll("#fleet-table tbody tr").length`); n != 1 {
		t.Errorf("%d fleet rows, want the dev stack's one worker", n)
	}

	// 2. Figures move as tasks flow: 600 sleeps of 30ms on 4 slots keep the
	// low queue busy for about 5 s.
	var batch strings.Builder
	batch.WriteString(`{"tasks":[`)
	for i := range 600 {
		if i > 0 {
			batch.WriteString(",")
		}
		batch.WriteString(`{"type":"demo.sleep","priority":"low","payload":{"ms":30}}`)
	}
	batch.WriteString(`]}`)
	post(t, ctx, st.BrokerURL+"/v1/tasks/batch", batch.String())
	b.waitJS("a low backlog", numberIn("#prio-low .pending")+" > 0", 10*time.Second)
	b.waitJS("processed/s above zero", numberIn("#prio-low .rate")+" > 0 && "+numberIn("#total-rate")+" > 0", 15*time.Second)
	b.waitJS("busy slots in the fleet", `document.querySelectorAll("#fleet-table .slotbar i.busy").length > 0`, 10*time.Second)
	b.waitJS("pickup percentiles", `document.querySelector("#lat-pickup .p99").textContent !== "—"`, 10*time.Second)
	b.waitJS("a few seconds of chart", `document.querySelector("#prio-low .backlog-chart polyline")?.points.length >= 6`, 15*time.Second)
	shot := b.screenshot("ui-dashboard.png")
	t.Logf("screenshot under load: %s", shot)
	b.waitJS("the low backlog drained", numberIn("#prio-low .pending")+" === 0 && "+numberIn("#prio-low .inflight")+" === 0", 30*time.Second)
	b.waitJS("the fleet's processed count", `[...document.querySelectorAll("#fleet-table td.processed")].some(td => parseFloat(td.textContent.replace(/,/g, "")) >= 600)`, 10*time.Second)

	// 3. A dead letter shows up in the list, opens, and is replayed from
	// the page after the confirmation.
	post(t, ctx, st.BrokerURL+"/v1/tasks", `{"type":"demo.fail","priority":"high","id":"ui-dead-1","max_retries":0,"payload":{"fail_times":1}}`)
	deadRow := `[...document.querySelectorAll("#dlq-list tbody tr")].find(r => r.children[2].textContent === "ui-dead-1")`
	b.waitJS("the dead letter in the list", deadRow+` !== undefined`, 15*time.Second)
	seq := eval[string](b, deadRow+`.dataset.seq`)
	rowSel := fmt.Sprintf(`#dlq-list tbody tr[data-seq="%s"]`, seq)
	b.do("opening the dead letter", 10*time.Second, press(rowSel))
	b.waitJS("the dead letter's detail", `!document.querySelector("#dlq-detail").hidden && document.querySelector("#dlq-detail-error").textContent.includes("demo.fail") && document.querySelector("#dlq-detail-headers").textContent.includes("Spool-Reason")`, 10*time.Second)
	if p := eval[string](b, `document.querySelector("#dlq-detail-payload").textContent`); !strings.Contains(p, "fail_times") {
		t.Errorf("payload preview %q", p)
	}
	b.screenshot("ui-dashboard-dlq.png")
	b.do("asking to replay", 10*time.Second, press("#dlq-replay"))
	b.waitJS("the confirmation", `document.querySelector("#confirm").open && document.querySelector("#confirm-text").textContent.includes("ui-dead-1")`, 15*time.Second)
	b.do("confirming the replay", 10*time.Second, press("#confirm-ok"))
	b.waitJS("the replay done", fmt.Sprintf(`document.querySelector("#dlq-message").textContent.includes("Replayed #%s") && !document.querySelector(%s)`, seq, jsString(rowSel)), 10*time.Second)
	b.waitJS("the replay in the task's history", `document.querySelector("#lookup-id").value === "ui-dead-1" && document.querySelector("#lookup-timeline").textContent.includes("replayed from the DLQ")`, 10*time.Second)
	// demo.fail fails the replayed attempt again (attempts start over): it
	// comes back as a new dead letter, which proves the replay ran.
	b.waitJS("the replayed task dead again", deadRow+` !== undefined && `+deadRow+fmt.Sprintf(`.dataset.seq !== %s`, jsString(seq)), 20*time.Second)

	// Purge, filtered by type, after the confirmation.
	b.do("filtering the dead letters", 10*time.Second,
		chromedp.SendKeys(chromedp.CSS("#dlq-type"), "demo.fail"),
		press(`#dlq-filter button[type="submit"]`),
		press("#dlq-purge"),
	)
	b.waitJS("the purge confirmation", `document.querySelector("#confirm").open && document.querySelector("#confirm-text").textContent.includes("type=demo.fail")`, 15*time.Second)
	b.do("confirming the purge", 10*time.Second, press("#confirm-ok"))
	b.waitJS("the purge done", `document.querySelector("#dlq-message").textContent === "Purged 1 dead letter." && document.querySelectorAll("#dlq-list tbody tr").length === 0`, 10*time.Second)
	b.waitJS("an empty dead-letter stream", numberIn("#dead-letters")+" === 0", 5*time.Second)

	// 4. A task looked up by id: its result document and history.
	post(t, ctx, st.BrokerURL+"/v1/tasks", `{"type":"demo.echo","priority":"critical","id":"ui-echo-1","payload":{"hello":"dashboard"}}`)
	b.do("looking the task up", 10*time.Second,
		chromedp.Evaluate[chromedp.Void](`document.querySelector("#lookup-id").value = ""`),
		chromedp.SendKeys(chromedp.CSS("#lookup-id"), "ui-echo-1"),
		press("#lookup-go"),
	)
	b.waitJS("the completed task", `document.querySelector("#lookup-state").textContent === "completed" && document.querySelector("#lookup-doc").textContent.includes('"hello": "dashboard"')`, 15*time.Second)
	if h := eval[string](b, `location.hash`); h != "#task=ui-echo-1" {
		t.Errorf("the lookup's link is %q", h)
	}
	timeline := eval[string](b, `document.querySelector("#lookup-timeline").textContent`)
	for _, want := range []string{"enqueued (critical)", "attempt 1 started", "completed"} {
		if !strings.Contains(timeline, want) {
			t.Errorf("timeline %q lacks %q", timeline, want)
		}
	}

	// 4a. A running task's lookup shows the progress its handler last
	// reported, as it moves: demo.progress reports after each of 8 steps
	// of 1s (12.5% each), so the page, polling every second, sees two.
	post(t, ctx, st.BrokerURL+"/v1/tasks", `{"type":"demo.progress","priority":"critical","id":"ui-progress-1","payload":{"steps":8,"ms":1000}}`)
	b.do("looking the running task up", 10*time.Second,
		chromedp.Evaluate[chromedp.Void](`document.querySelector("#lookup-id").value = ""`),
		chromedp.SendKeys(chromedp.CSS("#lookup-id"), "ui-progress-1"),
		press("#lookup-go"),
	)
	// shownStep is the step of the progress the lookup shows while the
	// task runs, with its percentage; 0 when it shows none.
	shownStep := `(() => { const m = document.querySelector("#lookup-state").textContent === "processing" && /progress ([0-9.]+)% \{"step":(\d),"steps":8\}/.exec(document.querySelector("#lookup-summary").textContent); return m && Number(m[1]) === 12.5 * Number(m[2]) ? Number(m[2]) : 0; })()`
	b.waitJS("a progress report", shownStep+" > 0", 15*time.Second)
	first := eval[int](b, shownStep)
	if first == 0 || first == 8 {
		t.Fatalf("the lookup shows step %d: too late to see the progress move (summary %q)", first, eval[string](b, `document.querySelector("#lookup-summary").textContent`))
	}
	b.waitJS("a later progress report", fmt.Sprintf("%s > %d", shownStep, first), 15*time.Second)
	b.waitJS("the task completed, its progress gone", `document.querySelector("#lookup-state").textContent === "completed" && !/progress [0-9.]+%/.test(document.querySelector("#lookup-summary").textContent)`, 15*time.Second)

	// 4b. Pause a priority from its row, cancel a task queued behind the
	// pause from the lookup, resume: the cancelled task never runs.
	b.do("asking to pause normal", 10*time.Second, press("#prio-normal .pause-toggle"))
	b.waitJS("the pause confirmation", `document.querySelector("#confirm").open && document.querySelector("#confirm-text").textContent.includes("Pause priority normal")`, 5*time.Second)
	b.do("confirming the pause", 10*time.Second, press("#confirm-ok"))
	b.waitJS("normal shown paused", `document.querySelector("#prio-normal .pause-state").textContent === "paused" && document.querySelector("#prio-normal .pause-toggle").textContent === "Resume"`, 10*time.Second)
	post(t, ctx, st.BrokerURL+"/v1/tasks", `{"type":"demo.echo","priority":"normal","id":"ui-paused-1","payload":{"n":1}}`)
	b.waitJS("the task queued behind the pause", numberIn("#prio-normal .pending")+" === 1", 10*time.Second)
	b.do("looking the queued task up", 10*time.Second,
		chromedp.Evaluate[chromedp.Void](`document.querySelector("#lookup-id").value = ""`),
		chromedp.SendKeys(chromedp.CSS("#lookup-id"), "ui-paused-1"),
		press("#lookup-go"),
	)
	b.waitJS("the cancel control for a queued task", `!document.querySelector("#cancel-form").hidden`, 10*time.Second)
	b.do("asking to cancel", 10*time.Second,
		chromedp.SendKeys(chromedp.CSS("#cancel-reason"), "not needed"),
		press("#lookup-cancel"),
	)
	b.waitJS("the cancel confirmation", `document.querySelector("#confirm").open && document.querySelector("#confirm-text").textContent.includes("ui-paused-1")`, 5*time.Second)
	b.do("confirming the cancel", 10*time.Second, press("#confirm-ok"))
	b.waitJS("the cancelled task, with who and why", `document.querySelector("#lookup-state").textContent === "cancelled" && document.querySelector("#lookup-cancelled").textContent === "Cancelled by dashboard: not needed" && document.querySelector("#cancel-form").hidden`, 10*time.Second)
	b.screenshot("ui-dashboard-cancelled.png")
	b.do("asking to resume normal", 10*time.Second, press("#prio-normal .pause-toggle"))
	b.waitJS("the resume confirmation", `document.querySelector("#confirm").open && document.querySelector("#confirm-text").textContent.includes("Resume priority normal")`, 5*time.Second)
	b.do("confirming the resume", 10*time.Second, press("#confirm-ok"))
	b.waitJS("normal resumed and drained", `document.querySelector("#prio-normal .pause-state").textContent === "" && `+numberIn("#prio-normal .pending")+" === 0 && "+numberIn("#prio-normal .inflight")+" === 0", 15*time.Second)
	if got := eval[string](b, `document.querySelector("#lookup-state").textContent`); got != "cancelled" {
		t.Errorf("the cancelled task ended %q after the resume", got)
	}

	// 4b'. Pause a task type from the types panel: its task waits unrun,
	// queued behind its type consumer, which the pause holds (workers pull
	// by type and the dev stack's worker serves demo.echo exactly); resume
	// from its row: the task runs on its first attempt.
	b.do("asking to pause type demo.echo", 10*time.Second,
		chromedp.SendKeys(chromedp.CSS("#type-pause-type"), "demo.echo"),
		chromedp.SendKeys(chromedp.CSS("#type-pause-reason"), "ui check"),
		press("#type-pause-submit"),
	)
	b.waitJS("the type pause confirmation", `document.querySelector("#confirm").open && document.querySelector("#confirm-text").textContent.includes("Pause task type demo.echo")`, 5*time.Second)
	b.do("confirming the type pause", 10*time.Second, press("#confirm-ok"))
	typeRow := `document.querySelector('#types-table tr[data-type="demo.echo"]')`
	b.waitJS("demo.echo shown paused", typeRow+`?.querySelector(".type-state").textContent === "until resumed" && `+typeRow+`.textContent.includes("ui check")`, 10*time.Second)
	post(t, ctx, st.BrokerURL+"/v1/tasks", `{"type":"demo.echo","priority":"high","id":"ui-typepaused-1","payload":{"n":2}}`)
	b.waitJS("the task queued behind the type's pause", numberIn("#prio-high .pending")+` === 1 && `+typeRow+`?.querySelector(".parked").textContent === "0"`, 15*time.Second)
	b.do("asking to resume demo.echo", 10*time.Second, press(`#types-table tr[data-type="demo.echo"] .type-resume`))
	b.waitJS("the type resume confirmation", `document.querySelector("#confirm").open && document.querySelector("#confirm-text").textContent.includes("Resume task type demo.echo")`, 5*time.Second)
	b.do("confirming the type resume", 10*time.Second, press("#confirm-ok"))
	b.waitJS("no type paused or parked", typeRow+` === null && !document.querySelector("#types-empty").hidden`, 15*time.Second)
	b.do("looking the parked task up", 10*time.Second,
		chromedp.Evaluate[chromedp.Void](`document.querySelector("#lookup-id").value = ""`),
		chromedp.SendKeys(chromedp.CSS("#lookup-id"), "ui-typepaused-1"),
		press("#lookup-go"),
	)
	b.waitJS("the resumed task completed on attempt 1", `document.querySelector("#lookup-state").textContent === "completed" && document.querySelector("#lookup-doc").textContent.includes('"attempts": 1')`, 15*time.Second)

	// 4c. A periodic task created, paused, resumed and deleted from the
	// schedules panel; while active it fires demo.echo tasks.
	resultsBefore := eval[float64](b, numberIn("#results-count"))
	b.do("creating a schedule", 10*time.Second,
		chromedp.SendKeys(chromedp.CSS("#sched-name"), "ui-every-second"),
		chromedp.SendKeys(chromedp.CSS("#sched-spec"), "@every 1s"),
		chromedp.SendKeys(chromedp.CSS("#sched-type"), "demo.echo"),
		press("#sched-save"),
	)
	schedRow := `document.querySelector('#sched-table tr[data-name="ui-every-second"]')`
	b.waitJS("the schedule listed with its next run", schedRow+`?.querySelector(".sched-state").textContent === "active" && `+schedRow+`.querySelector(".sched-next").textContent !== "—"`, 10*time.Second)
	b.waitJS("a fired task in the results", fmt.Sprintf("%s > %v", numberIn("#results-count"), resultsBefore), 10*time.Second)
	b.do("pausing the schedule", 10*time.Second, press(`#sched-table tr[data-name="ui-every-second"] .sched-toggle`))
	b.waitJS("the schedule paused", schedRow+`?.querySelector(".sched-state").textContent === "paused" && `+schedRow+`.querySelector(".sched-next").textContent === "—"`, 10*time.Second)
	b.do("resuming the schedule", 10*time.Second, press(`#sched-table tr[data-name="ui-every-second"] .sched-toggle`))
	b.waitJS("the schedule active again", schedRow+`?.querySelector(".sched-state").textContent === "active"`, 10*time.Second)
	b.screenshot("ui-dashboard-schedules.png")
	b.do("asking to delete the schedule", 10*time.Second, press(`#sched-table tr[data-name="ui-every-second"] .sched-delete`))
	b.waitJS("the delete confirmation", `document.querySelector("#confirm").open && document.querySelector("#confirm-text").textContent.includes("ui-every-second")`, 5*time.Second)
	b.do("confirming the delete", 10*time.Second, press("#confirm-ok"))
	b.waitJS("the schedule gone", schedRow+` === null && document.querySelector("#sched-message").textContent === "Schedule ui-every-second deleted."`, 10*time.Second)

	// 4b. A binary output: shown as a hex dump, downloaded byte for byte.
	bin := make([]byte, 0, 263)
	bin = append(bin, 0xff, 0xfe, 0xc3, 0x28, 0x00, 'o', 'k')
	for i := range 256 {
		bin = append(bin, byte(i))
	}
	post(t, ctx, st.BrokerURL+"/v1/tasks", `{"type":"demo.echo","id":"ui-bin-1","payload_base64":"`+base64.StdEncoding.EncodeToString(bin)+`"}`)
	b.do("looking the binary task up", 10*time.Second,
		chromedp.Evaluate[chromedp.Void](`document.querySelector("#lookup-id").value = ""`),
		chromedp.SendKeys(chromedp.CSS("#lookup-id"), "ui-bin-1"),
		press("#lookup-go"),
	)
	b.waitJS("the binary output", `!document.querySelector("#lookup-output").hidden && document.querySelector("#lookup-output-kind").textContent.startsWith("binary output") && document.querySelector("#lookup-output-preview").textContent.startsWith("binary, 263 B")`, 15*time.Second)
	b.do("downloading the output", 10*time.Second, press("#lookup-output-download"))
	b.waitJS("the download's object URL", `document.querySelector("#lookup-output-download").href.startsWith("blob:")`, 5*time.Second)
	// The page's CSP (connect-src 'self') keeps scripts from reading the
	// blob: URL back, so read what the download fetched, the same way.
	b.do("reading the download", 10*time.Second, chromedp.Evaluate[chromedp.Void](
		`fetch("/v1/tasks/ui-bin-1/result", { headers: { Authorization: "Bearer " + sessionStorage.getItem("spool.token") } }).then(r => r.arrayBuffer()).then(a => { window.spoolDownload = Array.from(new Uint8Array(a)).join(","); }); 0`))
	b.waitJS("the downloaded bytes", `window.spoolDownload !== undefined`, 5*time.Second)
	want := make([]string, len(bin))
	for i, c := range bin {
		want[i] = strconv.Itoa(int(c))
	}
	if got := eval[string](b, `window.spoolDownload`); got != strings.Join(want, ",") {
		t.Errorf("downloaded %s, want %s", got, strings.Join(want, ","))
	}
	if name := eval[string](b, `document.querySelector("#lookup-output-download").download`); name != "ui-bin-1.bin" {
		t.Errorf("download name %q", name)
	}

	// 4c. A flow-control limit set from the form (with per-key order
	// "hold") shows in the table, a bad one is refused with the reason,
	// and the limit is removed again.
	b.do("setting a limit", 10*time.Second,
		chromedp.SendKeys(chromedp.CSS("#limits-type"), "demo.sleep"),
		chromedp.SendKeys(chromedp.CSS("#limits-concurrency"), "3"),
		chromedp.SendKeys(chromedp.CSS("#limits-rate"), "50/1s"),
		chromedp.SetValue(chromedp.CSS("#limits-ordered"), "hold"),
		press(`#limits-form button[type="submit"]`),
	)
	b.waitJS("the limit listed", `(document.querySelector('#limits-list tr[data-type="demo.sleep"]')?.textContent || "").includes("/ 3") && document.querySelector('#limits-list tr[data-type="demo.sleep"]').textContent.includes("50/1s") && document.querySelector('#limits-list tr[data-type="demo.sleep"]').textContent.includes("hold")`, 10*time.Second)
	// Its use: no key busy, no task waiting for a slot, the rate below
	// its limit (nothing ran).
	b.waitJS("the limit's use", `document.querySelector('#limits-list tr[data-type="demo.sleep"] .rate-now').textContent === "below the limit" && document.querySelector('#limits-list tr[data-type="demo.sleep"] .busiest').textContent === "—" && document.querySelector('#limits-list tr[data-type="demo.sleep"] .waiting').textContent === "0"`, 10*time.Second)
	b.do("setting a bad limit", 10*time.Second,
		chromedp.SendKeys(chromedp.CSS("#limits-type"), "demo.sleep"),
		chromedp.SendKeys(chromedp.CSS("#limits-rate"), "50/soon"),
		press(`#limits-form button[type="submit"]`),
	)
	b.waitJS("the bad limit refused", `document.querySelector("#limits-message").textContent.includes("period \"soon\"")`, 10*time.Second)
	b.do("removing the limit", 10*time.Second, press(`#limits-list tr[data-type="demo.sleep"] button`))
	b.waitJS("the removal confirmation", `document.querySelector("#confirm").open`, 5*time.Second)
	b.do("confirming the removal", 10*time.Second, press("#confirm-ok"))
	b.waitJS("the limit gone", `document.querySelector('#limits-list tr[data-type="demo.sleep"]') === null`, 10*time.Second)

	// 4d. A task whose result is discarded: the lookup says it completed
	// and kept no document, and offers no cancel.
	post(t, ctx, st.BrokerURL+"/v1/tasks", `{"type":"demo.echo","id":"ui-gone-1","result_policy":"discard","payload":{"n":1}}`)
	b.do("looking the discarded task up", 10*time.Second,
		chromedp.Evaluate[chromedp.Void](`document.querySelector("#lookup-id").value = ""`),
		chromedp.SendKeys(chromedp.CSS("#lookup-id"), "ui-gone-1"),
		press("#lookup-go"),
	)
	b.waitJS("the discarded result", `document.querySelector("#lookup-message").textContent.startsWith("Task ui-gone-1 completed; its result was discarded") && document.querySelector("#lookup-result").hidden && document.querySelector("#cancel-form").hidden`, 15*time.Second)

	// 5. Nothing left the broker's origin.
	reqs := b.requested()
	if len(reqs) < 10 {
		t.Errorf("only %d requests seen: %v", len(reqs), reqs)
	}
	if out := onlyFrom(reqs, st.BrokerURL); len(out) > 0 {
		t.Errorf("the page requested other origins: %v", out)
	}

	// 6. NATS goes away: a red banner, the last figures kept, greyed. It
	// comes back on the same port and store: the page recovers by itself.
	u, err := url.Parse(st.URL)
	if err != nil {
		t.Fatal(err)
	}
	port, err := strconv.Atoi(u.Port())
	if err != nil {
		t.Fatal(err)
	}
	st.Server.Shutdown()
	st.Server.WaitForShutdown()
	b.waitJS("the unreachable banner", `!document.querySelector("#banner").hidden && document.querySelector("#banner").textContent.includes("NATS is unreachable") && document.body.classList.contains("stale")`, 10*time.Second)
	if got := eval[string](b, `document.querySelector("#results-count").textContent`); got == "—" || got == "" {
		t.Errorf("the last figures are gone: results %q", got)
	}
	b.screenshot("ui-dashboard-unreachable.png")
	srv, err := embedded.Start(embedded.Options{Name: "spool-dev", Port: port, StoreDir: storeDir})
	if err != nil {
		t.Fatalf("restarting the server: %v", err)
	}
	st.Server = srv // Stop shuts this one down
	b.waitJS("the banner gone", `document.querySelector("#banner").hidden && !document.body.classList.contains("stale") && document.querySelector("#conn").textContent === "live"`, 15*time.Second)
}
