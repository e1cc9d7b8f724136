package security_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/spoolq/spool/consumer"
	"github.com/spoolq/spool/consumer/service"
	"github.com/spoolq/spool/producer"
	"github.com/spoolq/spool/producer/httpapi"
	spool "github.com/spoolq/spool/shared"
	"github.com/spoolq/spool/streams/admin"
	"github.com/spoolq/spool/streams/dlq"
)

// TestBrokerRole: the HTTP broker running as spool-broker enqueues, serves
// the queue's metrics and the dashboard's overview (with the consumers'
// service stats), and lists, shows, replays and purges dead letters, all
// without a permissions violation.
func TestBrokerRole(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := testContext(t)
	for i := range 2 {
		h := nats.Header{}
		h.Set(spool.HeaderTaskID, "dead-"+strconv.Itoa(i))
		h.Set(spool.HeaderReason, "error")
		h.Set(spool.HeaderOriginalSubject, "spool.tasks.high.report")
		h.Set(spool.HeaderOriginalSeq, strconv.Itoa(100+i))
		if _, err := f.admin.js.PublishMsg(ctx, &nats.Msg{Subject: "spool.dlq.high.report", Header: h, Data: []byte("{}")}); err != nil {
			t.Fatal(err)
		}
	}
	// A consumer process answering the service API, for the overview.
	cons := f.srv.connect(t, "spool-consumer")
	w, err := consumer.New(cons.nc, consumer.NewMux(), consumer.WithWorkerName("fleet-1"))
	if err != nil {
		t.Fatal(err)
	}
	svc, err := service.Add(cons.nc, w)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = svc.Stop() })

	b := f.srv.connect(t, "spool-broker")
	client, err := producer.New(b.nc, producer.WithLogger(testLogger(t)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(client.Close)
	adm, err := admin.New(b.nc)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(httpapi.NewHandler(client, adm, httpapi.Options{Logger: testLogger(t), Registry: prometheus.NewRegistry()}))
	t.Cleanup(srv.Close)
	call := func(method, path, body string) (int, string) {
		t.Helper()
		req, err := http.NewRequestWithContext(ctx, method, srv.URL+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		out, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return resp.StatusCode, string(out)
	}
	check := func(method, path, body string, want int, contains string) string {
		t.Helper()
		code, out := call(method, path, body)
		if code != want || !strings.Contains(out, contains) {
			t.Fatalf("%s %s: %d %s, want %d with %q", method, path, code, out, want, contains)
		}
		return out
	}

	check("POST", "/v1/tasks", `{"type":"report","priority":"high","id":"b-1"}`, 201, `"b-1"`)
	check("GET", "/metrics", "", 200, "\nspool_queue_status_up 1\n")
	check("GET", "/v1/overview", "", 200, `"fleet-1"`)
	out := check("GET", "/v1/dlq?reason=error", "", 200, `"dead-1"`)
	var page dlq.Page
	if err := json.Unmarshal([]byte(out), &page); err != nil || len(page.Letters) != 2 {
		t.Fatalf("dead letters %s (%v)", out, err)
	}
	seq := strconv.FormatUint(page.Letters[0].Seq, 10)
	check("GET", "/v1/dlq/"+seq, "", 200, `"dead-0"`)
	check("POST", "/v1/dlq/"+seq+"/replay", "", 200, `"result_written":true`)
	check("DELETE", "/v1/dlq?all=true", "", 200, `"purged":1`)
	check("POST", "/v1/types/report/pause?reason=audit", "", 200, `"paused":true`)
	check("GET", "/v1/types", "", 200, `"type":"report","paused":true`)
	check("GET", "/v1/overview", "", 200, `"type":"report","paused":true`)
	check("POST", "/v1/types/report/resume", "", 200, `"paused":false`)
	b.noViolation(t)
	cons.noViolation(t)
}

// TestBrokerRoleByType: where workers pull by type, the broker's status
// and its pauses of priorities and types list the task consumers and
// pause and resume those they concern, as spool-broker.
func TestBrokerRoleByType(t *testing.T) {
	t.Parallel()
	f := newByTypeFixture(t)
	ctx := testContext(t)
	for _, pattern := range []string{"shop.order", "mail.*"} {
		cfg, err := f.typeConsumer(ctx, spool.High, pattern)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.admin.js.CreateConsumer(ctx, names.TaskStream(), cfg); err != nil {
			t.Fatal(err)
		}
	}
	// paused reports, as admin sees it, whether each consumer is paused.
	paused := func() (shop, mail bool) {
		t.Helper()
		for _, pattern := range []string{"shop.order", "mail.*"} {
			cn, err := f.admin.js.Consumer(ctx, names.TaskStream(), names.TypeConsumer(spool.High, pattern))
			if err != nil {
				t.Fatal(err)
			}
			if pattern == "shop.order" {
				shop = cn.CachedInfo().Paused
			} else {
				mail = cn.CachedInfo().Paused
			}
		}
		return shop, mail
	}
	b := f.srv.connect(t, "spool-broker")
	adm, err := admin.New(b.nc, admin.WithLogger(testLogger(t)))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := adm.Status(ctx); err != nil {
		t.Fatalf("status: %v", err)
	}
	if _, err := adm.PausePriority(ctx, spool.High, time.Now().Add(time.Hour)); err != nil {
		t.Fatalf("pausing a priority: %v", err)
	}
	if shop, mail := paused(); !shop || !mail {
		t.Fatalf("after the priority's pause: shop.order paused %v, mail.* paused %v, want both", shop, mail)
	}
	if err := adm.ResumePriority(ctx, spool.High); err != nil {
		t.Fatalf("resuming a priority: %v", err)
	}
	if _, err := adm.PauseType(ctx, "shop.order", admin.TypePauseOptions{By: "ops"}); err != nil {
		t.Fatalf("pausing a type: %v", err)
	}
	if shop, mail := paused(); !shop || mail {
		t.Fatalf("after the type's pause: shop.order paused %v, mail.* paused %v, want shop.order only", shop, mail)
	}
	if err := adm.ResumeType(ctx, "shop.order"); err != nil {
		t.Fatalf("resuming a type: %v", err)
	}
	if shop, mail := paused(); shop || mail {
		t.Fatalf("after the resumes: shop.order paused %v, mail.* paused %v, want neither", shop, mail)
	}
	b.noViolation(t)
}
