package httpapi_test

import (
	"context"
	"net/http"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/spoolq/spool/producer/httpapi"
	"github.com/spoolq/spool/streams"
	"github.com/spoolq/spool/streams/admin"
	"github.com/spoolq/spool/streams/embedded"
)

// overviewDoc is the part of GET /v1/overview the broker's tests read
// (streams/admin tests the whole document).
type overviewDoc struct {
	Time       time.Time `json:"time"`
	Priorities []struct {
		Priority  string  `json:"priority"`
		Pending   uint64  `json:"pending"`
		Processed *uint64 `json:"processed"`
		Busy      *int    `json:"busy"`
	} `json:"priorities"`
	DeadLetters uint64 `json:"dead_letters"`
	FleetError  string `json:"fleet_error"`
	Totals      struct {
		Members int `json:"members"`
	} `json:"totals"`
}

// TestOverviewQueue reads the overview through the broker. The fleet's
// decoding and sums are tested with their code in streams/admin (TestFleet,
// TestOverview), and with real consumers by tests/ui and tests/devstack.
func TestOverviewQueue(t *testing.T) {
	t.Parallel()
	b := startBrokerWith(t, embedded.Options{}, streams.Settings{Consumers: streams.ConsumersByPriority}, httpapi.Options{})
	for range 3 {
		if r := b.do(t, "POST", "/v1/tasks", "", []byte(`{"type":"ov.test","priority":"low"}`)); r.status != 201 {
			t.Fatalf("enqueue: %d %s", r.status, r.body)
		}
	}
	b.deadLetter(t, "ov-dead", 1, "ov.test", "error")
	// A consumer's pending count follows its stream's stores a moment
	// later (the server signals consumers from a goroutine of its own), and
	// an answer is reused for OverviewCacheTTL: read until it shows the
	// three tasks, within a deadline.
	var ov overviewDoc
	for deadline := time.Now().Add(10 * time.Second); ; {
		r := b.do(t, "GET", "/v1/overview", "", nil)
		if r.status != 200 {
			t.Fatalf("overview: %d %s", r.status, r.body)
		}
		ov = decode[overviewDoc](t, r)
		if len(ov.Priorities) != 5 || ov.DeadLetters != 1 || time.Since(ov.Time) > time.Minute {
			t.Fatalf("overview %+v", ov)
		}
		if ov.Priorities[3].Pending == 3 || time.Now().After(deadline) {
			break
		}
		select {
		case <-t.Context().Done():
			t.Fatal(t.Context().Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
	if low := ov.Priorities[3]; low.Priority != "low" || low.Pending != 3 || low.Processed != nil || low.Busy != nil {
		t.Fatalf("low priority %+v (no worker reports figures)", low)
	}
}

func TestOverviewEmptyFleetAndCache(t *testing.T) {
	t.Parallel()
	b := startBroker(t, embedded.Options{}, httpapi.Options{})
	start := time.Now()
	r := b.do(t, "GET", "/v1/overview", "", nil)
	if r.status != 200 {
		t.Fatalf("overview: %d %s", r.status, r.body)
	}
	if !strings.Contains(string(r.body), `"fleet":[]`) {
		t.Errorf("an empty fleet is not an empty list: %s", r.body)
	}
	first := decode[overviewDoc](t, r)
	if first.Totals.Members != 0 || first.FleetError != "" {
		t.Errorf("fleet %+v error %q", first.Totals, first.FleetError)
	}
	// No responders ends the fleet wait at once.
	if d := time.Since(start); d > admin.DefaultFleetWait+time.Second {
		t.Errorf("overview took %s", d)
	}
	// A second read within the TTL is the cached answer; it may also be
	// a new one when the first one is already older than the TTL.
	second := decode[overviewDoc](t, b.do(t, "GET", "/v1/overview", "", nil))
	if !second.Time.Equal(first.Time) && time.Since(first.Time) < httpapi.OverviewCacheTTL {
		t.Errorf("read again within the TTL: %s then %s", first.Time, second.Time)
	}
}

func TestOverviewUnavailable(t *testing.T) {
	t.Parallel()
	b := startBroker(t, embedded.Options{}, httpapi.Options{})
	b.nc.Close() // the broker's connection is gone: NATS is unreachable for it
	r := b.do(t, "GET", "/v1/overview", "", nil)
	code, _, _ := r.errorCode()
	if r.status != http.StatusServiceUnavailable || code != httpapi.CodeUnavailable || r.header.Get("Retry-After") == "" {
		t.Fatalf("closed connection: %d %s %q", r.status, code, r.body)
	}
}

func TestUIRoutes(t *testing.T) {
	t.Parallel()
	const tok = "ui-s3cret"
	b := startBroker(t, embedded.Options{}, httpapi.Options{Token: tok})
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	req, err := http.NewRequestWithContext(ctxFor(t), "GET", b.url+"/ui", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := noRedirect.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMovedPermanently || resp.Header.Get("Location") != "/ui/" {
		t.Fatalf("/ui: %d to %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	// The static files hold no data: served without the token, with a
	// policy that forbids any other origin.
	external := regexp.MustCompile(`(?i)(https?:)?//[a-z0-9.-]+\.[a-z]{2,}`)
	for file, ctype := range map[string]string{"": "text/html", "index.html": "text/html", "app.js": "text/javascript", "app.css": "text/css"} {
		r := b.do(t, "GET", "/ui/"+file, "", nil)
		if r.status != 200 || !strings.HasPrefix(r.header.Get("Content-Type"), ctype) || len(r.body) < 100 {
			t.Fatalf("/ui/%s: %d %q %d bytes", file, r.status, r.header.Get("Content-Type"), len(r.body))
		}
		if csp := r.header.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'self'") {
			t.Errorf("/ui/%s: CSP %q", file, csp)
		}
		for _, u := range external.FindAllString(string(r.body), -1) {
			if u != "http://www.w3.org" { // the SVG namespace, not a request
				t.Errorf("/ui/%s refers to %s", file, u)
			}
		}
	}
	if r := b.do(t, "GET", "/ui/missing.js", "", nil); r.status != 404 {
		t.Errorf("missing file: %d", r.status)
	}
	// The data needs the token, as the API does.
	if r := b.do(t, "GET", "/v1/overview", "", nil); r.status != 401 || r.header.Get("WWW-Authenticate") == "" {
		t.Errorf("overview without token: %d", r.status)
	}
	if r := b.do(t, "GET", "/v1/overview", "wrong", nil); r.status != 401 {
		t.Errorf("overview with a wrong token: %d", r.status)
	}
	if r := b.do(t, "GET", "/v1/overview", tok, nil); r.status != 200 || r.header.Get("Cache-Control") != "no-store" {
		t.Errorf("overview with the token: %d %s", r.status, r.body)
	}
}

// TestOverviewAtScale fills the task stream and the DLQ with raw messages
// and checks that the overview and a dead-letter page stay quick: their
// cost does not grow with the backlog. SPOOL_UI_SCALE_TASKS sets the
// number of queued tasks: default 50,000 to keep the suite quick;
// SPOOL_UI_SCALE_TASKS=1000000 is the figure (minutes to fill).
func TestOverviewAtScale(t *testing.T) {
	if testing.Short() {
		t.Skip("fills streams with 60,000 messages")
	}
	t.Parallel()
	tasks := 50_000
	if v := os.Getenv("SPOOL_UI_SCALE_TASKS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("SPOOL_UI_SCALE_TASKS=%q", v)
		}
		tasks = n
	}
	const deadLetters = 10_000
	b := startBrokerWith(t, embedded.Options{}, streams.Settings{Consumers: streams.ConsumersByPriority}, httpapi.Options{})
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
	defer cancel()
	js, err := jetstream.New(b.nc, jetstream.WithPublishAsyncMaxPending(4096))
	if err != nil {
		t.Fatal(err)
	}
	publish := func(n int, msg func(i int) *nats.Msg) {
		t.Helper()
		for i := range n {
			if _, err := js.PublishMsgAsync(msg(i)); err != nil {
				t.Fatal(err)
			}
			if (i+1)%2000 != 0 && i != n-1 {
				continue
			}
			select { // a window of 2,000 unacknowledged publishes
			case <-js.PublishAsyncComplete():
			case <-ctx.Done():
				t.Fatal("publishing: ", ctx.Err())
			}
		}
	}
	fill := time.Now()
	publish(tasks, func(int) *nats.Msg { return &nats.Msg{Subject: "spool.tasks.low.scale", Data: []byte("{}")} })
	publish(deadLetters, func(i int) *nats.Msg {
		m := nats.NewMsg("spool.dlq.normal.scale.dead")
		m.Header.Set("Spool-Task-Id", "dead-"+strconv.Itoa(i))
		m.Header.Set("Spool-Reason", "error")
		m.Header.Set("Spool-Error", "boom")
		m.Header.Set("Spool-Original-Subject", "spool.tasks.normal.scale.dead")
		m.Data = []byte(`{"n":1}`)
		return m
	})
	t.Logf("filled %d tasks and %d dead letters in %s", tasks, deadLetters, time.Since(fill).Round(time.Millisecond))

	// A consumer's pending count follows its stream's stores a moment
	// later (the server signals consumers from a goroutine of its own), and
	// an answer is reused for OverviewCacheTTL: read until it shows every
	// task, within a deadline. The first read computes the overview: it is
	// the one timed.
	var ov overviewDoc
	var took time.Duration
	for deadline := time.Now().Add(10 * time.Second); ; {
		start := time.Now()
		r := b.do(t, "GET", "/v1/overview", "", nil)
		if took == 0 {
			took = time.Since(start)
		}
		if r.status != 200 {
			t.Fatalf("overview: %d %s", r.status, r.body)
		}
		ov = decode[overviewDoc](t, r)
		if ov.Priorities[3].Pending == uint64(tasks) || time.Now().After(deadline) {
			break
		}
		select {
		case <-t.Context().Done():
			t.Fatal(t.Context().Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
	if ov.Priorities[3].Pending != uint64(tasks) || ov.DeadLetters != deadLetters {
		t.Fatalf("low pending %d, dead letters %d", ov.Priorities[3].Pending, ov.DeadLetters)
	}
	t.Logf("overview with %d queued tasks: %s", tasks, took)
	if took > 2*time.Second {
		t.Errorf("overview took %s", took)
	}
	start := time.Now()
	r := b.do(t, "GET", "/v1/dlq?limit=50", "", nil)
	took = time.Since(start)
	page := decode[struct {
		Letters []struct {
			Seq uint64 `json:"seq"`
		} `json:"dead_letters"`
		Next uint64 `json:"next"`
	}](t, r)
	if r.status != 200 || len(page.Letters) != 50 || page.Next != page.Letters[49].Seq {
		t.Fatalf("first page: %d, %d letters, next %d", r.status, len(page.Letters), page.Next)
	}
	t.Logf("a page of 50 of %d dead letters: %s", deadLetters, took)
	if took > 2*time.Second {
		t.Errorf("a dead-letter page took %s", took)
	}
}
