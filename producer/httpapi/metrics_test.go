package httpapi_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/spoolq/spool/producer/httpapi"
	"github.com/spoolq/spool/streams"
	"github.com/spoolq/spool/streams/embedded"
	"github.com/spoolq/spool/streams/streamstest"
)

func TestMetrics(t *testing.T) {
	t.Parallel()
	b := startBrokerWith(t, embedded.Options{}, streams.Settings{Consumers: streams.ConsumersByPriority}, httpapi.Options{Token: "tok", Registry: prometheus.NewPedanticRegistry()})
	if r := b.do(t, "POST", "/v1/tasks", "tok", []byte(`{"type":"report","priority":"high","payload":{"a":1}}`)); r.status != 201 {
		t.Fatalf("enqueue: %d %s", r.status, r.body)
	}
	b.do(t, "GET", "/v1/tasks/nope", "tok", nil)
	b.do(t, "GET", "/no/such/route", "tok", nil)
	b.deadLetter(t, "d1", 1, "report", "error")
	if r := b.do(t, "PUT", "/v1/limits/report", "tok", []byte(`{"concurrency":4,"rate":{"limit":10,"period":"1s"}}`)); r.status != 200 {
		t.Fatalf("setting a limit: %d %s", r.status, r.body)
	}

	if r := b.do(t, "GET", "/metrics", "", nil); r.status != 401 {
		t.Fatalf("GET /metrics without the token: %d", r.status)
	}
	if r := b.do(t, "POST", "/metrics", "tok", nil); r.status != 405 {
		t.Fatalf("POST /metrics: %d", r.status)
	}
	// The queue figures are cached for a second: wait for the dead letter.
	streamstest.WaitFor(t, 10*time.Second, func() error {
		r := b.do(t, "GET", "/metrics", "tok", nil)
		if r.status != 200 {
			return fmt.Errorf("GET /metrics: %d %s", r.status, r.body)
		}
		body := string(r.body)
		for _, want := range []string{
			`spool_broker_requests_total{code="201",route="POST /v1/tasks"} 1`,
			`spool_broker_requests_total{code="404",route="GET /v1/tasks/{id}"} 1`,
			`spool_broker_requests_total{code="404",route="unmatched"} 1`,
			`spool_broker_request_duration_seconds_count{route="POST /v1/tasks"} 1`,
			`spool_queue_pending{priority="high"} 1`,
			`spool_queue_in_flight{priority="high"} 0`,
			`spool_queue_oldest_wait_seconds{priority="high"}`,
			`spool_queue_scheduled 0`,
			`spool_dlq_messages 1`,
			`spool_task_store_bytes`,
			"\nspool_queue_status_up 1\n",
			`spool_limit_concurrency{type="report"} 4`,
			`spool_limit_running{type="report"} 0`,
			`spool_limit_rate_per_second{scope="type",type="report"} 10`,
			`spool_limit_rate_waiting{type="report"} 0`,
			`spool_limit_rate_next_start_seconds{type="report"} 0`,
			"\nspool_limits_up 1\n",
		} {
			if !strings.Contains(body, want) {
				return fmt.Errorf("/metrics lacks %s:\n%s", want, body)
			}
		}
		return nil
	})
}
